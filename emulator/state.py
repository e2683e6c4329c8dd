"""The tenant's live state: chats, their members and messages, and every user's mailbox.

Uvicorn serves from its own thread while tests read and inject from theirs, so every access goes
through one lock. Critical sections are short and never await. Reads hand out immutable snapshots.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
import secrets
import threading
import uuid
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from emulator.changes import ChangeObserver, ChatMessageChange, MailChange, ResourceChange
from emulator.clock import Clock
from emulator.seed import Seed, SeedUser, group_chat_id, one_on_one_chat_id
from emulator.timestamps import epoch_ms, from_epoch_ms, resolve_time, truncate_ms

ChatType = Literal["oneOnOne", "group"]
MessageType = Literal["message", "systemEventMessage", "chatEvent"]
Folder = Literal["inbox", "sentitems"]
FOLDERS: tuple[Folder, ...] = ("inbox", "sentitems")
_TAG = re.compile(r"<[^>]+>")


class StateError(Exception):
    """A request the tenant's rules refuse; ``kind`` says which Graph error it maps to."""

    def __init__(
        self, kind: Literal["not_found", "forbidden", "bad_request"], message: str
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(frozen=True)
class Member:
    user_id: str
    display_name: str
    email: str
    roles: tuple[str, ...]
    visible_history_start: datetime | None  # None: all history ("0001-01-01T00:00:00Z")
    tenant_id: str  # the tenant the user belongs to: this one, or an external user's own


@dataclass(frozen=True)
class Chat:
    id: str
    chat_type: ChatType
    topic: str | None
    created: datetime
    last_updated: datetime
    members: tuple[Member, ...]

    def has_member(self, user_id: str) -> bool:
        return any(m.user_id == user_id for m in self.members)


@dataclass(frozen=True)
class Sender:
    user_id: str
    display_name: str


@dataclass(frozen=True)
class Reaction:
    reaction_type: str  # "like", "heart", … or a unicode emoji, as Graph's reactionType
    user_id: str
    created: datetime


@dataclass(frozen=True)
class ChatMessage:
    id: str  # epoch milliseconds of creation, as Teams issues them
    chat_id: str
    message_type: MessageType
    created: datetime
    last_modified: datetime
    sender: Sender | None  # None for system messages
    content: str
    content_type: Literal["text", "html"]
    event_detail: dict[str, Any] | None = None
    last_edited: datetime | None = None
    deleted: datetime | None = None
    reactions: tuple[Reaction, ...] = ()
    mentions: tuple[Mention, ...] = ()
    attachments: tuple[CardAttachment, ...] = ()


@dataclass(frozen=True)
class CardAttachment:
    """A card a message carries: ``<attachment id="…">`` in its HTML body, the card's JSON as a string.
    A file shared into the chat is one too: contentType "reference", no content, its URL and name."""

    id: str
    content_type: str
    content: str | None
    content_url: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class Mention:
    """A chatMessageMention: ``<at id="N">text</at>`` in the HTML body names user ``user_id``."""

    id: int
    text: str
    user_id: str
    display_name: str | None


@dataclass(frozen=True)
class HostedContent:
    """An image pasted into a chat message: Graph's chatMessageHostedContent, bytes and all."""

    id: str
    content_type: str
    data: bytes = field(repr=False)


@dataclass(frozen=True)
class Address:
    name: str
    address: str


@dataclass(frozen=True)
class MailMessage:
    id: str
    owner_id: str
    folder: Folder
    subject: str
    body: str
    content_type: Literal["text", "html"]
    sender: Address
    to: tuple[Address, ...]
    cc: tuple[Address, ...]
    received: datetime
    sent: datetime
    internet_message_id: str
    conversation_id: str
    change_key: str
    is_read: bool
    headers: tuple[tuple[str, str], ...] = ()  # internetMessageHeaders, in the order they arrived

    @property
    def body_preview(self) -> str:
        text = self.body if self.content_type == "text" else html.unescape(_TAG.sub(" ", self.body))
        return " ".join(text.split())[:255]


def _outlook_id(prefix: str = "AAMkA") -> str:
    """A long base64-ish id like Exchange issues (URL-safe alphabet, so it can sit in a path)."""
    return prefix + base64.urlsafe_b64encode(secrets.token_bytes(105)).decode()


class TenantState:
    def __init__(self, seed: Seed, clock: Clock) -> None:
        self.seed = seed
        self._clock = clock
        self._lock = threading.RLock()
        self._chats: dict[str, Chat] = {}
        self._messages: dict[str, dict[str, ChatMessage]] = defaultdict(dict)
        self._hosted: dict[tuple[str, str], tuple[HostedContent, ...]] = {}
        self._chats_of: dict[str, set[str]] = defaultdict(set)
        self._mail: dict[str, dict[str, MailMessage]] = defaultdict(dict)
        self._folder_ids = {
            (u.id, f): "AAMkAF"
            + base64.urlsafe_b64encode(hashlib.sha256(f"{u.id}/{f}".encode()).digest()).decode()
            for u in seed.users
            for f in FOLDERS
        }
        self._observers: list[ChangeObserver] = []
        self._load(seed)
        # Teams, channels and channel messages live in emulator.team_state, under this lock and
        # announced to the same observers (imported here: team_state imports this module).
        from emulator.team_state import TeamState

        self.teams = TeamState(seed, clock, self._lock, self._changed)

    # --- observers (the subscription engine registers one) ---

    def add_observer(self, observer: ChangeObserver) -> None:
        with self._lock:
            self._observers.append(observer)

    def _changed(self, change: ResourceChange) -> None:
        for observer in self._observers:
            observer(change)

    # --- start-up ---

    def _load(self, seed: Seed) -> None:
        now = self._clock.now()
        for n, spec in enumerate(seed.chats):
            members = [self._user(m) for m in spec.members]
            created = resolve_time(spec.created, now) or now
            chat_id = spec.id or (
                one_on_one_chat_id(members[0].id, members[1].id)
                if spec.chat_type == "oneOnOne"
                else group_chat_id(seed.tenant_id, "seed", n)
            )
            self._insert_chat(
                Chat(
                    chat_id,
                    spec.chat_type,
                    spec.topic,
                    truncate_ms(created),
                    truncate_ms(created),
                    tuple(_member(u, self.seed.tenant_id) for u in members),
                )
            )
            for m in spec.messages:
                self.post_message(
                    chat_id,
                    sender_id=self._user(m.from_user).id if m.from_user else None,
                    content=m.content,
                    content_type=m.content_type,
                    created=resolve_time(m.created, now),
                    message_type=m.message_type,
                )
        for mail in seed.mail:
            self.deliver_mail(
                to=mail.to,
                from_address=mail.from_address,
                from_name=mail.from_name,
                subject=mail.subject,
                body=mail.body,
                content_type=mail.content_type,
                received=resolve_time(mail.received, now),
                headers=mail.headers,
            )

    def _user(self, ref: str) -> SeedUser:
        user = self.seed.find_user(ref)
        if user is None:
            raise StateError(
                "not_found",
                f"Resource '{ref}' does not exist or one of its queried "
                "reference-property objects are not present.",
            )
        return user

    # --- chats ---

    def chat(self, chat_id: str) -> Chat | None:
        with self._lock:
            return self._chats.get(chat_id)

    def chats_of(self, user_id: str) -> list[Chat]:
        with self._lock:
            return [self._chats[c] for c in self._chats_of.get(user_id, ())]

    def readable_chat(self, chat_id: str, user_id: str | None) -> Chat:
        """The chat, if it exists and ``user_id`` is a member (None: an app with tenant-wide permission)."""
        chat = self.chat(chat_id)
        if chat is None:
            raise StateError("not_found", f"Chat '{chat_id}' was not found.")
        if user_id is not None and not chat.has_member(user_id):
            raise StateError(
                "forbidden",
                f"The caller is not a member of chat '{chat_id}'; only chat members "
                "can read or post its messages.",
            )
        return chat

    def create_chat(
        self,
        chat_type: ChatType,
        member_ids: list[str],
        *,
        topic: str | None = None,
        initiator: str | None = None,
        created: datetime | None = None,
        chat_id: str | None = None,
    ) -> tuple[Chat, bool]:
        """Create a chat; a oneOnOne chat of the same two users is found, not created again.
        Returns the chat and whether it is new."""
        users = [self._user(m) for m in member_ids]
        if len({u.id for u in users}) != len(users):
            raise StateError("bad_request", "A member appears more than once in the members list.")
        if chat_type == "oneOnOne":
            if len(users) != 2:
                raise StateError("bad_request", "A oneOnOne chat must have exactly two members.")
            if topic:
                raise StateError("bad_request", "A oneOnOne chat cannot have a topic.")
        elif len(users) < 3:
            raise StateError(
                "bad_request",
                "A group chat needs at least three members, including the caller; "
                "use chatType oneOnOne for two people.",
            )
        at = truncate_ms(created or self._clock.now())
        with self._lock:
            if chat_type == "oneOnOne":
                chat_id = chat_id or one_on_one_chat_id(users[0].id, users[1].id)
                existing = self._chats.get(chat_id)
                if existing is not None:
                    return existing, False
            else:
                chat_id = chat_id or group_chat_id(uuid.uuid4())
                if chat_id in self._chats:
                    raise StateError("bad_request", f"Chat '{chat_id}' already exists.")
            chat = Chat(
                chat_id,
                chat_type,
                topic,
                at,
                at,
                tuple(_member(u, self.seed.tenant_id) for u in users),
            )
            self._insert_chat(chat)
            if chat_type == "group":
                self._system_message(chat_id, "membersAdded", [u.id for u in users], initiator, at)
            return self._chats[chat_id], True

    def add_member(
        self,
        chat_id: str,
        user_ref: str,
        *,
        initiator: str | None,
        visible_history_start: datetime | None = None,
    ) -> Member:
        user = self._user(user_ref)
        with self._lock:
            chat = self._chats.get(chat_id)
            if chat is None:
                raise StateError("not_found", f"Chat '{chat_id}' was not found.")
            if chat.chat_type == "oneOnOne":
                raise StateError(
                    "bad_request",
                    "Members cannot be added to a oneOnOne chat; create a group chat.",
                )
            if chat.has_member(user.id):
                raise StateError(
                    "bad_request", f"User '{user.id}' is already a member of chat '{chat_id}'."
                )
            member = replace(
                _member(user, self.seed.tenant_id), visible_history_start=visible_history_start
            )
            now = truncate_ms(self._clock.now())
            self._chats[chat_id] = replace(chat, members=(*chat.members, member), last_updated=now)
            self._chats_of[user.id].add(chat_id)
            self._system_message(chat_id, "membersAdded", [user.id], initiator, now)
            return member

    def _insert_chat(self, chat: Chat) -> None:
        with self._lock:
            self._chats[chat.id] = chat
            for m in chat.members:
                self._chats_of[m.user_id].add(chat.id)

    # --- chat messages ---

    def post_message(
        self,
        chat_id: str,
        *,
        sender_id: str | None,
        content: str,
        content_type: Literal["text", "html"] = "text",
        created: datetime | None = None,
        message_type: MessageType = "message",
        event_detail: dict[str, Any] | None = None,
        mentions: Sequence[Mention] = (),
        attachments: Sequence[CardAttachment] = (),
    ) -> ChatMessage:
        sender = None
        if sender_id is not None:
            user = self._user(sender_id)
            sender = Sender(user.id, user.display_name)
        with self._lock:
            chat = self._chats.get(chat_id)
            if chat is None:
                raise StateError("not_found", f"Chat '{chat_id}' was not found.")
            if sender is not None and not chat.has_member(sender.user_id):
                raise StateError(
                    "forbidden", f"User '{sender.user_id}' is not a member of chat '{chat_id}'."
                )
            ms = epoch_ms(created or self._clock.now())
            existing = self._messages[chat_id]
            while str(ms) in existing:  # Teams ids are creation milliseconds, unique within a chat
                ms += 1
            at = from_epoch_ms(ms)
            if message_type != "message":  # system messages have no sender, only an event
                if event_detail is None:
                    event_detail = _members_added_detail(
                        [sender.user_id] if sender else [], None, self.seed.tenant_id
                    )
                sender = None
            message = ChatMessage(
                str(ms),
                chat_id,
                message_type,
                at,
                at,
                sender,
                content,
                content_type,
                event_detail,
                mentions=tuple(mentions),
                attachments=tuple(attachments),
            )
            existing[message.id] = message
            self._changed(
                ChatMessageChange(
                    "created", chat_id, message.id, tuple(m.user_id for m in chat.members)
                )
            )
            if at > chat.last_updated:
                self._chats[chat_id] = replace(chat, last_updated=at)
            return message

    def _system_message(
        self, chat_id: str, event: str, user_ids: list[str], initiator: str | None, at: datetime
    ) -> None:
        assert event == "membersAdded"
        self.post_message(
            chat_id,
            sender_id=None,
            content="<systemEventMessage/>",
            content_type="html",
            created=at,
            message_type="systemEventMessage",
            event_detail=_members_added_detail(user_ids, initiator, self.seed.tenant_id),
        )

    def edit_message(
        self,
        chat_id: str,
        message_id: str,
        content: str,
        content_type: Literal["text", "html"] | None = None,
    ) -> ChatMessage:
        """An edit moves lastModifiedDateTime, so an old message reappears to lastModified filters."""
        with self._lock:
            message = self._message(chat_id, message_id)
            now = self._later_than(message.last_modified)
            edited = replace(
                message,
                content=content,
                content_type=content_type or message.content_type,
                last_modified=now,
                last_edited=now,
            )
            self._messages[chat_id][message_id] = edited
            self._changed(
                ChatMessageChange("updated", chat_id, message_id, self._member_ids(chat_id))
            )
            return edited

    def delete_message(self, chat_id: str, message_id: str) -> ChatMessage:
        """A soft delete as Graph shows it: still listed, deletedDateTime set, body emptied, and
        lastModifiedDateTime moved (so it reappears to lastModified filters too)."""
        with self._lock:
            message = self._message(chat_id, message_id)
            now = self._later_than(message.last_modified)
            deleted = replace(message, content="", last_modified=now, deleted=now, reactions=())
            self._messages[chat_id][message_id] = deleted
            self._changed(
                ChatMessageChange("deleted", chat_id, message_id, self._member_ids(chat_id))
            )
            return deleted

    def react_to_message(
        self, chat_id: str, message_id: str, user_ref: str, reaction_type: str
    ) -> ChatMessage:
        """A reaction, which in Graph moves the message's lastModifiedDateTime as an edit does (its
        createdDateTime never moves). One reaction of a type per user, as Teams allows.

        Announced to subscriptions as ``updated``. Read, not run: "Get change notifications for messages
        in Teams channels and chats" offers only created, updated and deleted for chatMessage; Graph
        records a reaction as a modification of the message (chatMessageHistoryItem actions
        reactionAdded / reactionRemoved, lastModifiedDateTime "including when a reaction is added or
        removed"), so a reaction can only reach a subscriber as ``updated``, as an edit does. A repeated
        reaction changes nothing and announces nothing."""
        user = self._user(user_ref)
        with self._lock:
            message = self._message(chat_id, message_id)
            chat = self._chats[chat_id]
            if not chat.has_member(user.id):
                raise StateError(
                    "forbidden", f"User '{user.id}' is not a member of chat '{chat_id}'."
                )
            if message.deleted is not None:
                raise StateError(
                    "bad_request", f"Message '{message_id}' was deleted; it cannot be reacted to."
                )
            if any(
                r.user_id == user.id and r.reaction_type == reaction_type for r in message.reactions
            ):
                return message
            now = self._later_than(message.last_modified)
            reacted = replace(
                message,
                last_modified=now,
                reactions=(*message.reactions, Reaction(reaction_type, user.id, now)),
            )
            self._messages[chat_id][message_id] = reacted
            self._changed(
                ChatMessageChange("updated", chat_id, message_id, self._member_ids(chat_id))
            )
            return reacted

    def unreact_to_message(
        self, chat_id: str, message_id: str, user_ref: str, reaction_type: str
    ) -> ChatMessage:
        """The user's reaction of ``reaction_type`` taken back, which moves lastModifiedDateTime and is
        announced as ``updated`` like the reaction (chatMessageHistoryItem action reactionRemoved). Taking
        back a reaction the user has not set changes nothing (Graph's unsetReaction page does not say)."""
        user = self._user(user_ref)
        with self._lock:
            message = self._message(chat_id, message_id)
            if not self._chats[chat_id].has_member(user.id):
                raise StateError(
                    "forbidden", f"User '{user.id}' is not a member of chat '{chat_id}'."
                )
            kept = tuple(
                r
                for r in message.reactions
                if not (r.user_id == user.id and r.reaction_type == reaction_type)
            )
            if kept == message.reactions:
                return message
            unreacted = replace(
                message, last_modified=self._later_than(message.last_modified), reactions=kept
            )
            self._messages[chat_id][message_id] = unreacted
            self._changed(
                ChatMessageChange("updated", chat_id, message_id, self._member_ids(chat_id))
            )
            return unreacted

    def own_message(self, chat_id: str, message_id: str, user_id: str) -> ChatMessage:
        """The message, when ``user_id`` sent it and it is not deleted: a signed-in user may change only
        their own messages (Graph answers 403 for anyone else's, read, not run)."""
        with self._lock:
            message = self._message(chat_id, message_id)
            if message.sender is None or message.sender.user_id != user_id:
                raise StateError(
                    "forbidden",
                    f"User '{user_id}' did not send message '{message_id}'; "
                    "only the sender may update or delete it.",
                )
            return message

    def _message(self, chat_id: str, message_id: str) -> ChatMessage:
        message = self._messages.get(chat_id, {}).get(message_id)
        if message is None:
            raise StateError(
                "not_found", f"Message '{message_id}' was not found in chat '{chat_id}'."
            )
        return message

    def _member_ids(self, chat_id: str) -> tuple[str, ...]:
        chat = self._chats.get(chat_id)
        return tuple(m.user_id for m in chat.members) if chat else ()

    def _later_than(self, at: datetime) -> datetime:
        now = truncate_ms(self._clock.now())
        return now if now > at else from_epoch_ms(epoch_ms(at) + 1)

    def attach_images(
        self, chat_id: str, message_id: str, images: Sequence[tuple[str, bytes]]
    ) -> ChatMessage:
        """Images pasted into a message as it is posted: hosted contents, and an <img> each in its HTML
        body. The src is the public Graph URL, as Teams writes it; a client lists the hosted contents on
        its own Graph origin rather than following a URL someone's message carries."""
        with self._lock:
            message = self._message(chat_id, message_id)
            hosted = tuple(
                HostedContent(_hosted_id(message_id, n), kind, data)
                for n, (kind, data) in enumerate(images, start=1)
            )
            self._hosted[(chat_id, message_id)] = hosted
            tags = "".join(
                f'<img src="https://graph.microsoft.com/v1.0/chats/{chat_id}/messages/{message_id}'
                f'/hostedContents/{h.id}/$value" alt="image">'
                for h in hosted
            )
            content = (
                message.content if message.content_type == "html" else html.escape(message.content)
            )
            pasted = replace(message, content=f"<p>{content}</p>{tags}", content_type="html")
            self._messages[chat_id][message_id] = pasted
            return pasted

    def post_with_hosted_contents(
        self,
        chat_id: str,
        hosted: Sequence[tuple[str, str, bytes]],
        *,
        sender_id: str,
        content: str,
        mentions: Sequence[Mention] = (),
        attachments: Sequence[CardAttachment] = (),
    ) -> ChatMessage:
        """An HTML message posted with its hosted contents, each (temporaryId, contentType, bytes): stored
        as the message's hosted contents, and each ``../hostedContents/{temporaryId}/$value`` in the body
        rewritten to the stored one's Graph URL (the route checks every reference names one)."""
        with self._lock:  # one step for readers: the body is never seen with temporary references
            message = self.post_message(
                chat_id,
                sender_id=sender_id,
                content=content,
                content_type="html",
                mentions=mentions,
                attachments=attachments,
            )
            stored = tuple(
                HostedContent(_hosted_id(message.id, n), kind, data)
                for n, (_, kind, data) in enumerate(hosted, start=1)
            )
            base = f"https://graph.microsoft.com/v1.0/chats/{chat_id}/messages/{message.id}"
            for (temporary_id, _, _), h in zip(hosted, stored, strict=True):
                content = content.replace(
                    f"../hostedContents/{temporary_id}/$value",
                    f"{base}/hostedContents/{h.id}/$value",
                )
            self._hosted[(chat_id, message.id)] = stored
            posted = replace(message, content=content)
            self._messages[chat_id][message.id] = posted
            return posted

    def hosted_contents(self, chat_id: str, message_id: str) -> tuple[HostedContent, ...]:
        with self._lock:
            self._message(chat_id, message_id)
            return self._hosted.get((chat_id, message_id), ())

    def messages(self, chat_id: str) -> list[ChatMessage]:
        with self._lock:
            return list(self._messages.get(chat_id, {}).values())

    def last_message(self, chat_id: str) -> ChatMessage | None:
        with self._lock:
            values = self._messages.get(chat_id)
            if not values:
                return None
            return max(values.values(), key=lambda m: (m.created, int(m.id)))

    # --- mail ---

    def folder_id(self, user_id: str, folder: Folder) -> str:
        return self._folder_ids[(user_id, folder)]

    def folder_named(self, user_id: str, ref: str) -> Folder | None:
        """A well-known folder name (any case) or a folder id."""
        lowered = ref.lower()
        if lowered in FOLDERS:
            return lowered
        return next((f for f in FOLDERS if self._folder_ids.get((user_id, f)) == ref), None)

    def mailbox(self, user_id: str, folder: Folder | None = None) -> list[MailMessage]:
        with self._lock:
            return [
                m
                for m in self._mail.get(user_id, {}).values()
                if folder is None or m.folder == folder
            ]

    def mail_item(self, user_id: str, message_id: str) -> MailMessage | None:
        with self._lock:
            return self._mail.get(user_id, {}).get(message_id)

    def send_mail(
        self,
        sender_id: str,
        *,
        to: Sequence[str],
        cc: Sequence[str],
        bcc: Sequence[str],
        subject: str,
        body: str,
        content_type: Literal["text", "html"],
        save_to_sent: bool,
        headers: Sequence[tuple[str, str]] = (),
        conversation_id: str | None = None,
    ) -> list[MailMessage]:
        """Send as a tenant user: recipients in the tenant get it in their inbox; others leave the tenant.

        ``headers`` are the custom internet message headers the sender set: kept on the Sent Items copy and
        carried to every recipient, as transport carries any ``x-`` header. A reply or forward passes the
        conversation of the mail it answers."""
        user = self._user(sender_id)
        sender = Address(user.display_name, user.address)
        now = self._clock.now().replace(microsecond=0)
        internet_id = f"<{secrets.token_hex(12)}@{self.seed.tenant_domain}>"
        conversation = conversation_id or _outlook_id("AAQkA")
        to_addr = tuple(self._address(a) for a in to)
        cc_addr = tuple(self._address(a) for a in cc)
        bcc_addr = tuple(self._address(a) for a in bcc)  # delivered, never shown
        kept = tuple(headers)
        delivered = []
        with self._lock:
            if save_to_sent:
                delivered.append(
                    self._store(
                        user.id,
                        "sentitems",
                        subject,
                        body,
                        content_type,
                        sender,
                        to_addr,
                        cc_addr,
                        now,
                        internet_id,
                        conversation,
                        is_read=True,
                        headers=kept,
                    )
                )
            for address in {a.address.lower(): a for a in (*to_addr, *cc_addr, *bcc_addr)}.values():
                recipient = self.seed.find_user(address.address)
                if recipient is not None:
                    delivered.append(
                        self._store(
                            recipient.id,
                            "inbox",
                            subject,
                            body,
                            content_type,
                            sender,
                            to_addr,
                            cc_addr,
                            now,
                            internet_id,
                            conversation,
                            is_read=False,
                            headers=kept,
                        )
                    )
        return delivered

    def deliver_mail(
        self,
        *,
        to: str,
        from_address: str,
        from_name: str | None = None,
        subject: str = "",
        body: str = "",
        content_type: Literal["text", "html"] = "text",
        received: datetime | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> MailMessage:
        """Mail arriving from anywhere (the admin API and seeds use this), with the internet headers
        its sender's system wrote (``Auto-Submitted``, ``Precedence``, ``List-Unsubscribe``…)."""
        user = self._user(to)
        at = (received or self._clock.now()).replace(microsecond=0)
        sender = Address(from_name or from_address, from_address)
        with self._lock:
            return self._store(
                user.id,
                "inbox",
                subject,
                body,
                content_type,
                sender,
                (Address(user.display_name, user.address),),
                (),
                at,
                f"<{secrets.token_hex(12)}@{from_address.rpartition('@')[2] or 'external'}>",
                _outlook_id("AAQkA"),
                is_read=False,
                headers=tuple((headers or {}).items()),
            )

    def _address(self, ref: str) -> Address:
        user = self.seed.find_user(ref)
        return Address(user.display_name, user.address) if user else Address(ref, ref)

    def _store(
        self,
        owner: str,
        folder: Folder,
        subject: str,
        body: str,
        content_type: Literal["text", "html"],
        sender: Address,
        to: tuple[Address, ...],
        cc: tuple[Address, ...],
        at: datetime,
        internet_id: str,
        conversation: str,
        *,
        is_read: bool,
        headers: tuple[tuple[str, str], ...] = (),
    ) -> MailMessage:
        message = MailMessage(
            _outlook_id(),
            owner,
            folder,
            subject,
            body,
            content_type,
            sender,
            to,
            cc,
            at,
            at,
            internet_id,
            conversation,
            "CQAAABYAAA" + secrets.token_urlsafe(24),
            is_read,
            headers,
        )
        self._mail[owner][message.id] = message
        self._changed(MailChange("created", owner, folder, message.id, message.change_key))
        return message


def _member(user: SeedUser, tenant_id: str) -> Member:
    return Member(
        user.id, user.display_name, user.address, ("owner",), None, user.home_tenant_id or tenant_id
    )


def _members_added_detail(
    user_ids: list[str], initiator: str | None, tenant_id: str
) -> dict[str, Any]:
    return {
        "@odata.type": "#microsoft.graph.membersAddedEventMessageDetail",
        "visibleHistoryStartDateTime": "0001-01-01T00:00:00Z",
        "members": [
            {"id": uid, "displayName": None, "userIdentityType": "aadUser", "tenantId": tenant_id}
            for uid in user_ids
        ],
        "initiator": {
            "application": None,
            "device": None,
            "user": None
            if initiator is None
            else {
                "@odata.type": "#microsoft.graph.teamworkUserIdentity",
                "id": initiator,
                "displayName": None,
                "userIdentityType": "aadUser",
                "tenantId": tenant_id,
            },
        },
    }


def _hosted_id(message_id: str, n: int) -> str:
    # Teams' ids are base64 of a descriptor; opaque to clients, and so here.
    return base64.urlsafe_b64encode(f"id=x_{message_id}_{n},type=1".encode()).decode().rstrip("=")

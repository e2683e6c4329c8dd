"""Teams, their channels, and channel messages with their replies: the part of the tenant's state Teams
keeps per team. ``TenantState`` owns one ``TeamState`` and shares its lock and its observers with it.

What Graph documents, and what is modelled (read, not run: no tenant here):

- A channel message is a chatMessage with ``channelIdentity {teamId, channelId}`` and ``chatId`` null; a
  reply carries ``replyToId``, its root's id ("chatMessage resource type"; the response examples of
  "List channel messages", "List replies" and "chatMessage: delta"). Replies exist one level deep: a
  reply is posted to a root ("Reply to a message in a channel": POST …/messages/{message-id}/replies).
  Ids are creation milliseconds, unique within a channel, roots and replies alike.
- Only team members read or post; a private channel only its own members ("List channels": "Teams
  members can't see private or shared channels that they aren't members of").
- A reply touches its root. The changelog entry "Changed lastModifiedDateTime property in the
  chatMessage resource to represent the time the entity was last touched. It will always be set and
  never have a null value" (Graph changelog, Teams, beside "Added lastEditedDateTime") says what the
  property means but not which events touch a root. "chatMessage: delta" says more: "$filter ...
  lastModifiedDateTime gt 2019-02-27T07:13:28.000z will fetch any reply chain (each channel post
  message and associated reply messages) created or changed after the specified date time"; a reply
  chain whose only change is a new reply is "changed", and since the filter is on the root's
  lastModifiedDateTime, that root's lastModifiedDateTime must have moved. So posting a reply moves its
  root's lastModifiedDateTime (and etag) to the reply's creation time here. Uncertain: no page says it
  in so many words, none shows a root before and after a reply, and nothing here ran against a tenant.
  Whether the touch is announced to subscribers as an ``updated`` root is not documented either: only
  the reply's ``created`` is announced.
- Every change also takes a tenant-wide version number, which delta tokens remember (opaque to clients,
  as Graph's are), so a deltaLink followed later returns exactly the roots changed since.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Literal

from emulator.changes import ChannelMessageChange, ResourceChange
from emulator.clock import Clock
from emulator.seed import Seed, SeedUser, stable_id
from emulator.state import CardAttachment, Mention, Sender, StateError
from emulator.team_seed import MembershipType, SeedChannelMessage, SeedTeam
from emulator.timestamps import epoch_ms, from_epoch_ms, resolve_time, truncate_ms

GENERAL = "General"


@dataclass(frozen=True)
class TeamMember:
    user_id: str
    display_name: str
    email: str
    roles: tuple[str, ...]  # ("owner",) or ()


@dataclass(frozen=True)
class Team:
    id: str
    display_name: str
    description: str | None
    created: datetime
    members: tuple[TeamMember, ...]

    def has_member(self, user_id: str) -> bool:
        return any(m.user_id == user_id for m in self.members)


@dataclass(frozen=True)
class Channel:
    id: str
    team_id: str
    display_name: str
    description: str | None
    membership_type: MembershipType
    created: datetime
    members: tuple[str, ...] = ()  # a private channel's members (user ids)

    def visible_to(self, user_id: str | None) -> bool:
        """Whether ``user_id`` (already a team member; None: an app) sees this channel."""
        return user_id is None or self.membership_type == "standard" or user_id in self.members


@dataclass(frozen=True)
class ChannelMessage:
    id: str
    team_id: str
    channel_id: str
    reply_to_id: str | None  # None for a root (a "channel post"), else the root's id
    created: datetime
    last_modified: datetime
    sender: Sender
    content: str
    content_type: Literal["text", "html"]
    version: int  # the tenant-wide change counter when it last changed (delta tokens compare it)
    mentions: tuple[Mention, ...] = ()
    attachments: tuple[CardAttachment, ...] = ()
    subject: str | None = (
        None  # a root's subject line; Graph's chatMessage.subject (null on replies)
    )


def channel_thread_id(*parts: object) -> str:
    return (
        "19:"
        + hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:32]
        + "@thread.tacv2"
    )


class TeamState:
    def __init__(
        self,
        seed: Seed,
        clock: Clock,
        lock: threading.RLock,
        changed: Callable[[ResourceChange], None],
    ) -> None:
        self._seed = seed
        self._clock = clock
        self._lock = lock
        self._changed = changed
        self._teams: dict[str, Team] = {}
        self._channels: dict[str, dict[str, Channel]] = defaultdict(dict)  # team -> id -> channel
        self._messages: dict[tuple[str, str], dict[str, ChannelMessage]] = defaultdict(dict)
        self._version = 0
        for spec in seed.teams:
            self._load(spec)

    def _load(self, spec: SeedTeam) -> None:
        now = self._clock.now()
        team = self.add_team(
            spec.display_name,
            list(spec.members),
            owners=list(spec.owners),
            description=spec.description,
            team_id=spec.id,
        )
        for c in spec.channels:
            channel = next(
                (x for x in self._channels[team.id].values() if x.display_name == c.display_name),
                None,
            ) or self.add_channel(
                team.id,
                c.display_name,
                membership_type=c.membership_type,
                members=list(c.members),
                description=c.description,
                channel_id=c.id,
            )
            for m in c.messages:
                self._load_message(team.id, channel.id, m, None, now)

    def _load_message(
        self, team_id: str, channel_id: str, m: SeedChannelMessage, root: str | None, now: datetime
    ) -> None:
        posted = self.post(
            team_id,
            channel_id,
            sender_id=m.from_user,
            content=m.content,
            content_type=m.content_type,
            reply_to_id=root,
            created=resolve_time(m.created, now),
        )
        for r in m.replies:
            self._load_message(team_id, channel_id, r, posted.id, now)

    # --- teams ---

    def add_team(
        self,
        display_name: str,
        member_refs: list[str],
        *,
        owners: Sequence[str] = (),
        description: str | None = None,
        team_id: str | None = None,
    ) -> Team:
        """A new team with its General channel; ``team_id`` defaults to a stable GUID of the name."""
        users = [self._user(ref) for ref in member_refs]
        owner_ids = {self._user(ref).id for ref in owners}
        at = truncate_ms(self._clock.now())
        with self._lock:
            team_id = team_id or stable_id(self._seed.tenant_id, "team", display_name)
            if team_id in self._teams:
                raise StateError("bad_request", f"Team '{team_id}' already exists.")
            members = tuple(
                TeamMember(u.id, u.display_name, u.address, ("owner",) if u.id in owner_ids else ())
                for u in {u.id: u for u in users}.values()
            )
            team = Team(team_id, display_name, description, at, members)
            self._teams[team_id] = team
            self.add_channel(team_id, GENERAL, channel_id=channel_thread_id(team_id, GENERAL))
            return team

    def teams_of(self, user_id: str) -> list[Team]:
        with self._lock:
            return [t for t in self._teams.values() if t.has_member(user_id)]

    def team(self, team_id: str, user_id: str | None) -> Team:
        """The team, if it exists and ``user_id`` is a member (None: an app with tenant-wide permission)."""
        with self._lock:
            team = self._teams.get(team_id)
        if team is None:
            raise StateError("not_found", f"No team found with Group Id {team_id}")
        if user_id is not None and not team.has_member(user_id):
            raise StateError(
                "forbidden",
                f"The caller is not a member of team '{team_id}'; only team members can read its "
                "channels and messages.",
            )
        return team

    def add_member(self, team_id: str, user_ref: str, *, owner: bool = False) -> TeamMember:
        user = self._user(user_ref)
        with self._lock:
            team = self.team(team_id, None)
            if team.has_member(user.id):
                raise StateError(
                    "bad_request", f"User '{user.id}' is already a member of team '{team_id}'."
                )
            member = TeamMember(
                user.id, user.display_name, user.address, ("owner",) if owner else ()
            )
            self._teams[team_id] = replace(team, members=(*team.members, member))
            return member

    def remove_member(self, team_id: str, user_ref: str) -> None:
        """The user leaves the team and every private channel of it."""
        user = self._user(user_ref)
        with self._lock:
            team = self.team(team_id, None)
            if not team.has_member(user.id):
                raise StateError(
                    "not_found", f"User '{user.id}' is not a member of team '{team_id}'."
                )
            kept = tuple(m for m in team.members if m.user_id != user.id)
            self._teams[team_id] = replace(team, members=kept)
            for channel in self._channels[team_id].values():
                if user.id in channel.members:
                    self._channels[team_id][channel.id] = replace(
                        channel, members=tuple(m for m in channel.members if m != user.id)
                    )

    # --- channels ---

    def add_channel(
        self,
        team_id: str,
        display_name: str,
        *,
        membership_type: MembershipType = "standard",
        members: Sequence[str] = (),
        description: str | None = None,
        channel_id: str | None = None,
    ) -> Channel:
        member_ids = tuple(self._user(ref).id for ref in members)
        at = truncate_ms(self._clock.now())
        with self._lock:
            team = self.team(team_id, None)
            outsiders = [m for m in member_ids if not team.has_member(m)]
            if outsiders:
                raise StateError(
                    "bad_request",
                    f"Channel members must be members of team '{team_id}': {', '.join(outsiders)}.",
                )
            if any(c.display_name == display_name for c in self._channels[team_id].values()):
                raise StateError(
                    "bad_request", "Channel name already existed, please use other name."
                )
            channel_id = channel_id or channel_thread_id(team_id, display_name, uuid.uuid4())
            channel = Channel(
                channel_id,
                team_id,
                display_name,
                description,
                membership_type,
                at,
                member_ids if membership_type == "private" else (),
            )
            self._channels[team_id][channel_id] = channel
            return channel

    def channels(self, team_id: str, user_id: str | None) -> list[Channel]:
        """The channels of the team ``user_id`` may see (403/404 as ``team``)."""
        self.team(team_id, user_id)
        with self._lock:
            return [c for c in self._channels[team_id].values() if c.visible_to(user_id)]

    def channel(self, team_id: str, channel_id: str, user_id: str | None) -> Channel:
        self.team(team_id, user_id)
        with self._lock:
            channel = self._channels[team_id].get(channel_id)
        if channel is None:
            raise StateError(
                "not_found", f"Channel '{channel_id}' was not found in team '{team_id}'."
            )
        if not channel.visible_to(user_id):
            raise StateError(
                "forbidden",
                f"The caller is not a member of private channel '{channel_id}'.",
            )
        return channel

    # --- messages ---

    def post(
        self,
        team_id: str,
        channel_id: str,
        *,
        sender_id: str,
        content: str,
        content_type: Literal["text", "html"] = "text",
        reply_to_id: str | None = None,
        created: datetime | None = None,
        mentions: Sequence[Mention] = (),
        attachments: Sequence[CardAttachment] = (),
        subject: str | None = None,
    ) -> ChannelMessage:
        """A root message, or a reply to root ``reply_to_id``, posted by ``sender_id``; a reply touches
        its root (module docstring)."""
        user = self._user(sender_id)
        with self._lock:
            self.channel(team_id, channel_id, user.id)
            existing = self._messages[(team_id, channel_id)]
            root = None
            if reply_to_id is not None:
                root = existing.get(reply_to_id)
                if root is None:
                    raise StateError(
                        "not_found",
                        f"Message '{reply_to_id}' was not found in channel '{channel_id}'.",
                    )
                if root.reply_to_id is not None:
                    raise StateError(
                        "bad_request",
                        f"Message '{reply_to_id}' is a reply; replies can only be posted to a root message.",
                    )
            ms = epoch_ms(created or self._clock.now())
            while str(ms) in existing:
                ms += 1
            at = from_epoch_ms(ms)
            message = ChannelMessage(
                str(ms),
                team_id,
                channel_id,
                reply_to_id,
                at,
                at,
                Sender(user.id, user.display_name),
                content,
                content_type,
                self._next_version(),
                tuple(mentions),
                tuple(attachments),
                subject if reply_to_id is None else None,
            )
            existing[message.id] = message
            if root is not None and at > root.last_modified:
                existing[root.id] = replace(root, last_modified=at, version=self._next_version())
            self._changed(
                ChannelMessageChange("created", team_id, channel_id, message.id, reply_to_id)
            )
            return message

    def roots(self, team_id: str, channel_id: str) -> list[ChannelMessage]:
        with self._lock:
            return [
                m for m in self._messages[(team_id, channel_id)].values() if m.reply_to_id is None
            ]

    def replies(self, team_id: str, channel_id: str, root_id: str) -> list[ChannelMessage]:
        with self._lock:
            self.root(team_id, channel_id, root_id)
            return [
                m
                for m in self._messages[(team_id, channel_id)].values()
                if m.reply_to_id == root_id
            ]

    def root(self, team_id: str, channel_id: str, message_id: str) -> ChannelMessage:
        with self._lock:
            message = self._messages[(team_id, channel_id)].get(message_id)
        if message is None or message.reply_to_id is not None:
            raise StateError(
                "not_found", f"Message '{message_id}' was not found in channel '{channel_id}'."
            )
        return message

    def reply(self, team_id: str, channel_id: str, root_id: str, reply_id: str) -> ChannelMessage:
        with self._lock:
            message = self._messages[(team_id, channel_id)].get(reply_id)
        if message is None or message.reply_to_id != root_id:
            raise StateError(
                "not_found", f"Reply '{reply_id}' to message '{root_id}' was not found."
            )
        return message

    def version(self) -> int:
        with self._lock:
            return self._version

    def _next_version(self) -> int:
        self._version += 1
        return self._version

    def _user(self, ref: str) -> SeedUser:
        user = self._seed.find_user(ref)
        if user is None:
            raise StateError(
                "not_found",
                f"Resource '{ref}' does not exist or one of its queried "
                "reference-property objects are not present.",
            )
        return user

"""Which polled messages are worth delivering: people's chat messages, and mail a person wrote.

Pure decisions over what Graph returned. Identity is decided on immutable identifiers only: a display
name is chosen by its owner and can be changed to anyone's, so it never decides anything here.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from enum import Enum
from html.parser import HTMLParser
from typing import Protocol, TypeVar

from service.domain.identity import normalise_identifier, same_identifier


class SenderView(Protocol):
    """What the filter reads of a chat message's sender (``service.graph.models.MessageSender`` fits)."""

    @property
    def kind(self) -> str: ...  # "user", "application" or "device"

    @property
    def id(self) -> str: ...  # the AAD object id, for a user


class ChatMessageView(Protocol):
    """What the filter reads of a chat message (``service.graph.models.ChatMessage`` fits)."""

    @property
    def id(self) -> str: ...

    @property
    def message_type(self) -> str: ...

    @property
    def sender(self) -> SenderView | None: ...


M = TypeVar("M", bound=ChatMessageView)


def is_agent_sender(
    sender: SenderView, *, agent_upn: str | None, agent_object_id: str | None
) -> bool:
    """Whether the agent itself wrote this: by UPN where the sender carries one, else by object id.

    Graph's teamworkUserIdentity has no UPN today; a sender that does carry one (``user_principal_name``)
    is matched on it first.
    """
    upn = getattr(sender, "user_principal_name", None)
    if upn and same_identifier(upn, agent_upn):
        return True
    return same_identifier(sender.id, agent_object_id)


def is_person_message(message: ChatMessageView) -> bool:
    """Written by a user: Graph ``messageType`` "message" with a ``from.user`` (not an event or an app)."""
    sender = message.sender
    return message.message_type == "message" and sender is not None and sender.kind == "user"


def filter_human_messages(
    messages: Sequence[M],
    *,
    agent_upn: str | None,
    agent_object_id: str | None,
    sent_message_ids: Collection[str] = frozenset(),
) -> list[M]:
    """The messages a person wrote, in their order; drops:

    - system messages: Graph ``messageType`` other than "message", or no ``from.user`` (events, apps);
    - the agent's own, by UPN or else AAD object id — never by display name;
    - ``sent_message_ids``, ids the agent is known to have sent.

    Agent-user mode's rule. Delegated mode, where the agent's posts carry the signed-in person's identity,
    decides by the fleet's record of sent ids instead (``service.graph.authorship``).
    """
    if not agent_upn and not agent_object_id:
        raise ValueError(
            "filter_human_messages needs the agent's UPN or object id to drop its own messages; pass at "
            "least one (the upn / oid claims of the agent's token)"
        )
    kept: list[M] = []
    for message in messages:
        sender = message.sender
        if not is_person_message(message) or sender is None:
            continue
        if is_agent_sender(sender, agent_upn=agent_upn, agent_object_id=agent_object_id):
            continue
        if message.id in sent_message_ids:
            continue
        kept.append(message)
    return kept


# --- mail ---


class MailNoise(str, Enum):
    NO_SENDER = "no_sender"
    OWN_MAIL = "own_mail"
    NO_REPLY_SENDER = "no_reply_sender"
    MICROSOFT_NOTIFICATION = "microsoft_notification"
    AUTOMATED = "automated"  # an auto-reply or bulk mail, by its headers


_NO_REPLY_LOCAL_PART = re.compile(
    r"(?:^|[-_.+])(?:no[-_.]?reply|do[-_.]?not[-_.]?reply)(?:$|[-_.+])|^(?:mailer[-_.]?daemon|postmaster)(?:$|[+])"
)
# Domains that only send service notifications (Teams activity, missed messages, added-to-team mail).
_NOTIFICATION_DOMAINS = ("teams.mail.microsoft", "email.teams.microsoft.com", "teams.microsoft.com")
# Individual notification senders on domains where people also write from.
_NOTIFICATION_ADDRESSES = frozenset(
    {"msonlineservicesteam@microsoftonline.com", "o365mc@microsoft.com"}
)
# Subjects of Teams notification mail; trusted only from a Microsoft domain, because a person may well
# write "You have been added to the project".
_MICROSOFT_DOMAINS = (
    "microsoft.com",
    "microsoft",
    "microsoftonline.com",
    "office.com",
    "office365.com",
)
_NOTIFICATION_SUBJECT = re.compile(
    r"^\s*you(?:'ve| have) been added to\b"
    r"|\bmissed (?:teams )?(?:messages?|activity|conversations?|chats?)\b"
    r"|\btrying to reach you in (?:microsoft )?teams\b",
    re.IGNORECASE,
)


def _under(domain: str, parents: Sequence[str]) -> bool:
    return any(domain == parent or domain.endswith("." + parent) for parent in parents)


def _values(headers: Mapping[str, str], name: str) -> list[str]:
    """Every comma-separated value of the header ``name`` (any case), trimmed and lower-cased."""
    return [
        part.strip().lower()
        for key, value in headers.items()
        if key.lower() == name
        for part in value.split(",")
        if part.strip()
    ]


def _automated_by_headers(headers: Mapping[str, str]) -> bool:
    # RFC 3834: any value but "no" marks an automatic message (auto-generated, auto-replied…).
    if any(value != "no" for value in _values(headers, "auto-submitted")):
        return True
    if {"bulk", "junk", "auto_reply"} & set(_values(headers, "precedence")):
        return True
    # RFC 2369: an unsubscribe link is what newsletters and list mail carry, not a person's letter.
    names = {key.lower() for key in headers}
    return bool(names & {"x-autoreply", "x-autorespond", "list-unsubscribe"})


def mail_noise(
    sender_address: str | None,
    subject: str | None,
    headers: Mapping[str, str] | None = None,
    *,
    agent_addresses: Collection[str] = (),
) -> MailNoise | None:
    """Why this mail is not for the agent, or None when a person wrote it to the agent.

    ``agent_addresses``: the agent's own addresses (UPN, primary SMTP, aliases), so its sent mail and
    its own copies never come back to it. ``headers``: internetMessageHeaders as name → value.
    """
    address = normalise_identifier(sender_address) or ""
    if "@" not in address:
        return MailNoise.NO_SENDER
    if any(same_identifier(address, own) for own in agent_addresses):
        return MailNoise.OWN_MAIL
    local, _, domain = address.rpartition("@")
    if _NO_REPLY_LOCAL_PART.search(local):
        return MailNoise.NO_REPLY_SENDER
    if address in _NOTIFICATION_ADDRESSES or _under(domain, _NOTIFICATION_DOMAINS):
        return MailNoise.MICROSOFT_NOTIFICATION
    if subject and _under(domain, _MICROSOFT_DOMAINS) and _NOTIFICATION_SUBJECT.search(subject):
        return MailNoise.MICROSOFT_NOTIFICATION
    if headers and _automated_by_headers(headers):
        return MailNoise.AUTOMATED
    return None


def is_noise_mail(
    sender_address: str | None,
    subject: str | None,
    headers: Mapping[str, str] | None = None,
    *,
    agent_addresses: Collection[str] = (),
) -> bool:
    """Whether to drop this mail before claiming it (see :func:`mail_noise` for the reason)."""
    return mail_noise(sender_address, subject, headers, agent_addresses=agent_addresses) is not None


# --- HTML bodies ---

_SKIPPED_ELEMENTS = frozenset({"script", "style", "head", "title", "template", "noscript"})
_BLOCK_ELEMENTS = frozenset(  # a line break before and after
    {
        "p",
        "div",
        "table",
        "ul",
        "ol",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "blockquote",
        "pre",
        "hr",
        "section",
        "article",
        "header",
        "footer",
    }
)
_LINE_ELEMENTS = frozenset({"br", "li", "tr"})  # a line break before
_SPACES = re.compile(r"[ \t\f\v\u00a0]+")
_BLANK_LINES = re.compile(r"\n\s*\n\s*\n+")


class _TextExtractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skipping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIPPED_ELEMENTS:
            self._skipping += 1
        elif self._skipping:
            return
        elif tag in _BLOCK_ELEMENTS or tag in _LINE_ELEMENTS:
            self.parts.append("\n")
        elif tag in {"img", "emoji"}:  # Teams writes emoji as <emoji alt="🙂">
            alt = dict(attrs).get("alt")
            if alt:
                self.parts.append(alt)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in _SKIPPED_ELEMENTS:  # a self-closed <script/> opens nothing
            self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIPPED_ELEMENTS:
            self._skipping = max(self._skipping - 1, 0)
        elif not self._skipping and tag in _BLOCK_ELEMENTS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skipping:
            self.parts.append(data)


def html_to_text(markup: str) -> str:
    """Readable plain text of an HTML body (Teams chat messages and HTML mail).

    Scripts, styles and comments are dropped; block elements become line breaks; entities are decoded.
    The stdlib parser is enough here: it never fetches or executes anything, and tolerates broken markup.
    """
    parser = _TextExtractor()
    parser.feed(markup)
    parser.close()
    lines = (_SPACES.sub(" ", line).strip() for line in "".join(parser.parts).splitlines())
    return _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip()

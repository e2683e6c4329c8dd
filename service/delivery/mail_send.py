"""A mail sent once: a send whose outcome Graph left unknown is settled in Sent Items, never blindly repeated.

Graph has no idempotency key for mail, and sendMail, reply, replyAll and forward answer 202 with no
body, so a POST whose answer was lost (a 5xx or 504 after Exchange took it, a connection reset) may or
may not have sent. Every send therefore carries its own marker, the custom internet header
``x-entrabot-send-id`` (the sendMail page's example 2 sets custom headers; names must start with ``x-``),
and a lost answer is settled by looking in Sent Items, which keeps a copy of every one of these sends
("This method saves the message in the Sent Items folder", on each of the four pages), among the mail
sent since just before the attempt:

* a copy carrying our send id is ours: it was sent;
* a copy carrying no send id at all, with the subject and at least the recipients this send has, counts
  as ours too. Graph does not document that a reply or forward keeps custom headers given in its message
  parameter, nor that Sent Items returns them; erring this way never sends twice, at the cost that an
  identical mail the agent sent in that minute by other means is taken for this one;
* nothing found in every one of a few complete looks a moment apart: it was not sent, and it is sent
  again, once, with the same send id. A second unknown outcome is settled the same way; if that too
  finds nothing complete enough to prove absence, the caller is told it MAY have been sent.

Why several looks: sendMail's 202 "indicates that the request has been accepted; however, it does not
indicate that the request processing has completed", so the Sent Items copy may lag the answer (read,
not run: no tenant). A look that fails, meets an unreadable item or has more pages than it reads proves
nothing, so it makes the outcome unknown rather than absent. The window starts a minute before the
attempt, so the fleet's and Exchange's clocks may differ; Sent Items is filtered on receivedDateTime,
which Exchange sets on a sent copy too (read, not run).
"""

from __future__ import annotations

import asyncio
import uuid
from contextlib import aclosing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from typing import Literal

from service.clock import Clock
from service.graph.client import GraphClient
from service.graph.errors import GraphError, GraphUnavailable
from service.graph.models import MailMessage

SEND_ID_HEADER = "x-entrabot-send-id"
LOOK_BACK = timedelta(minutes=1)
SETTLE_LOOKS = 3
SETTLE_PAUSE_S = 2.0
SETTLE_PAGES = 2  # the agent's newest sent mail: a minute's worth fits in the first pages
SENT_ITEMS = "sentitems"

MailKind = Literal["new", "reply", "replyAll", "forward"]


class SendOutcome(str, Enum):
    SENT = "sent"  # Graph answered the send
    FOUND_AFTER_LOST_ANSWER = "found_after_lost_answer"  # Graph lost its answer; the mail is in Sent Items
    SENT_AFTER_CHECK = "sent_after_check"  # the first attempt provably did not send; sent again, once


def new_send_id() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True)
class OutgoingMail:
    """One send, whole: what Graph is asked to do, and how its Sent Items copy is recognised.

    For a reply or forward ``subject`` is the original's (Outlook prefixes it, in the mailbox's language)
    and ``answers`` its message id. ``to``/``cc`` are the recipients the copy will at least show: those
    given for a new mail or a forward (Graph is sent them), those Outlook takes from the original for a
    reply (Graph is sent none).
    """

    kind: MailKind
    subject: str
    to: tuple[str, ...]
    text: str
    send_id: str = field(default_factory=new_send_id)
    cc: tuple[str, ...] = ()
    content_type: Literal["text", "html"] = "text"
    answers: str | None = None

    @property
    def headers(self) -> dict[str, str]:
        return {SEND_ID_HEADER: self.send_id}


@dataclass(frozen=True)
class MailSent:
    outcome: SendOutcome
    send_id: str
    sent_item_id: str | None = None  # the Sent Items copy, when a settlement found it


class MailSendUnknown(Exception):
    """Graph failed after receiving the mail, twice, and Sent Items could not tell whether it went out."""


class _Look(Enum):
    ABSENT = "absent"  # a complete look that does not have it


def is_this_send(copy: MailMessage, mail: OutgoingMail) -> bool:
    """Whether a Sent Items copy is this send's (the rules in the module docstring)."""
    marker = next((v for k, v in copy.headers.items() if k.lower() == SEND_ID_HEADER), None)
    if marker is not None:
        return marker.strip() == mail.send_id
    subject = (copy.subject or "").strip().lower()
    wanted = mail.subject.strip().lower()
    if not (subject == wanted if mail.kind == "new" else subject.endswith(wanted)):
        return False
    shown = {a.address.lower() for a in (*copy.to_recipients, *copy.cc_recipients) if a.address}
    return {a.lower() for a in (*mail.to, *mail.cc)} <= shown


@dataclass(frozen=True)
class MailSender:
    graph: GraphClient
    clock: Clock
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    pause_s: float = SETTLE_PAUSE_S
    looks: int = SETTLE_LOOKS

    async def send(self, mail: OutgoingMail) -> MailSent:
        """Send once; GraphError for a failure that sent nothing, MailSendUnknown when nobody can tell."""
        for attempt in range(2):
            started = self.clock()
            try:
                await self._post(mail)
                return MailSent(SendOutcome.SENT if attempt == 0 else SendOutcome.SENT_AFTER_CHECK, mail.send_id)
            except GraphUnavailable as exc:
                if not exc.outcome_unknown:
                    raise
            found = await self.find(mail, started - LOOK_BACK)
            if found is not None:
                return MailSent(SendOutcome.FOUND_AFTER_LOST_ANSWER, mail.send_id, found.id)
        raise MailSendUnknown(mail.send_id)

    async def find(self, mail: OutgoingMail, since: datetime) -> MailMessage | None:
        """This send's copy in Sent Items since ``since``, looked for a few times a moment apart; None when
        every look was complete and it is not there; MailSendUnknown when a look cannot prove absence."""
        for look in range(self.looks):
            if look:
                await self.sleep(self.pause_s)
            found = await self._look(mail, since)
            if found is not _Look.ABSENT:
                return found
        return None

    async def _look(self, mail: OutgoingMail, since: datetime) -> MailMessage | _Look:
        try:
            async with aclosing(self.graph.list_mail(since, folder=SENT_ITEMS, max_pages=SETTLE_PAGES)) as pages:
                async for page in pages:
                    if page.skipped:
                        raise MailSendUnknown(mail.send_id)  # an unreadable copy may be ours
                    for copy in page.items:
                        if is_this_send(copy, mail):
                            return copy
                    if page.next_link is None:
                        return _Look.ABSENT
        except GraphError:
            raise MailSendUnknown(mail.send_id) from None
        raise MailSendUnknown(mail.send_id)  # more pages than we read: absence is not proven

    async def _post(self, mail: OutgoingMail) -> None:
        if mail.kind == "new":
            await self.graph.send_mail(mail.to, mail.subject, mail.text, cc=mail.cc, content_type=mail.content_type,
                                       headers=mail.headers)
            return
        assert mail.answers is not None, "a reply or forward names the mail it answers"
        await self.graph.answer_mail(mail.answers, mail.kind, mail.text, to=mail.to if mail.kind == "forward" else (),
                                     headers=mail.headers)

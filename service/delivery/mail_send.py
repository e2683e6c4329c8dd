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
  again, once, with the same send id (service.delivery.send_once holds that rule, shared with chat posts).

Why three looks here: sendMail's 202 "indicates that the request has been accepted; however, it does not
indicate that the request processing has completed", so the Sent Items copy may lag the answer (read,
not run: no tenant). Sent Items is filtered on receivedDateTime, which Exchange sets on a sent copy too
(read, not run).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Literal

from service.clock import Clock
from service.delivery.send_once import (
    LOOK_BACK,
    SETTLE_PAUSE_S,
    SendOnce,
    SendUnknown,
    first_in_pages,
)
from service.graph.client import GraphClient
from service.graph.models import MailMessage

SEND_ID_HEADER = "x-entrabot-send-id"
SETTLE_LOOKS = 3
SETTLE_PAGES = 2  # the agent's newest sent mail: a minute's worth fits in the first pages
SENT_ITEMS = "sentitems"

__all__ = ["LOOK_BACK", "MailSender", "OutgoingMail", "SendOutcome", "SendUnknown", "is_this_send"]

MailKind = Literal["new", "reply", "replyAll", "forward"]


class SendOutcome(str, Enum):
    SENT = "sent"  # Graph answered the send
    FOUND_AFTER_LOST_ANSWER = (
        "found_after_lost_answer"  # Graph lost its answer; the mail is in Sent Items
    )
    SENT_AFTER_CHECK = (
        "sent_after_check"  # the first attempt provably did not send; sent again, once
    )


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

    @property
    def _settle(self) -> SendOnce:
        return SendOnce(self.clock, looks=self.looks, pause_s=self.pause_s, sleep=self.sleep)

    async def send(self, mail: OutgoingMail) -> MailSent:
        """Send once; GraphError for a failure that sent nothing, SendUnknown when nobody can tell."""
        settled = await self._settle.send(
            lambda: self._post(mail), lambda since: self._look(mail, since)
        )
        if settled.found is not None:
            return MailSent(SendOutcome.FOUND_AFTER_LOST_ANSWER, mail.send_id, settled.found.id)
        return MailSent(
            SendOutcome.SENT_AFTER_CHECK if settled.retried else SendOutcome.SENT, mail.send_id
        )

    async def find(self, mail: OutgoingMail, since: datetime) -> MailMessage | None:
        """This send's copy in Sent Items since ``since``, looked for a few times a moment apart; None when
        every look was complete and it is not there; SendUnknown when a look cannot prove absence."""
        return await self._settle.look_for(lambda since: self._look(mail, since), since)

    async def _look(self, mail: OutgoingMail, since: datetime) -> MailMessage | None:
        return await first_in_pages(
            self.graph.mail.list_mail(since, folder=SENT_ITEMS, max_pages=SETTLE_PAGES),
            lambda copy: is_this_send(copy, mail),
        )

    async def _post(self, mail: OutgoingMail) -> None:
        if mail.kind == "new":
            await self.graph.mail.send_mail(
                mail.to,
                mail.subject,
                mail.text,
                cc=mail.cc,
                content_type=mail.content_type,
                headers=mail.headers,
            )
            return
        assert mail.answers is not None, "a reply or forward names the mail it answers"
        await self.graph.mail.answer_mail(
            mail.answers,
            mail.kind,
            mail.text,
            to=mail.to if mail.kind == "forward" else (),
            headers=mail.headers,
        )

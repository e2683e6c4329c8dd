"""The daily summary's mail to the sponsors, as the summary ledger sees it: a letter, and the mailer it needs.

The ledger decides when the mail may go (``summary_claim``: only after the move to ``mailing`` landed)
and records that it went; how a mail is sent once and found in Sent Items is the mailer's
(``service.workers.summary_mail`` over ``service.delivery.mail_send``), so this layer stays free of Graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from typing import Protocol

from service.ledger.summary.daily import Summary
from service.ledger.summary.triage import Section


@dataclass(frozen=True)
class SummaryLetter:
    day: date
    send_id: str  # the marker that finds this mail in Sent Items, whichever replica sent it
    to: tuple[str, ...]
    subject: str
    html: str


@dataclass(frozen=True)
class LetterSent:
    outcome: (
        str  # how it is known to be in Graph (the mailer's words: sent, found_after_lost_answer, …)
    )
    sent_item_id: str | None = None


class LetterUnknown(Exception):
    """The mailer cannot tell whether the letter went out; nothing may be sent until someone can."""


class LetterRefused(Exception):
    """Graph refused the letter, so it was not sent (a bad address, a missing permission)."""


class SummaryMailer(Protocol):
    def recipients(self) -> tuple[str, ...] | None:
        """The sponsors' addresses; () when there is nobody to mail, None when not known yet (wait)."""
        ...

    async def find(self, letter: SummaryLetter, since: datetime) -> str | None:
        """The id of the letter's copy in Sent Items since ``since`` (None: provably not there); LetterUnknown
        when that cannot be told."""
        ...

    async def send(self, letter: SummaryLetter) -> LetterSent:
        """Send once (a lost answer settled in Sent Items); LetterUnknown or LetterRefused when it cannot."""
        ...


def letter_subject(summary: Summary) -> str:
    counts = {section: len(summary.triage.of(section)) for section in Section}
    return (
        f"Daily summary {summary.day.isoformat()}: {counts[Section.NEEDS_YOU]} need you, "
        f"{counts[Section.HANDLED]} handled, {counts[Section.HEADS_UP]} heads-up"
    )

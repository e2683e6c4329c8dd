"""The daily summary's mailer: the sponsors from the sponsor gate, each letter sent once through MailSender.

Whom to mail is the agent identity's sponsors as last read (their mail, else their UPN). While the list is
not read, or too old to stand, nobody is known, so the summary waits rather than going to nobody; a fleet
with no agent identity (or none whose sponsors it can read) has nobody to mail, and its summaries are
produced without mail.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from service.delivery.mail_send import LOOK_BACK, MailSender, SendUnknown, OutgoingMail
from service.domain.sponsors import SponsorGate
from service.graph.errors import GraphError
from service.ledger.summary.mailing import LetterRefused, LetterSent, LetterUnknown, SummaryLetter


@dataclass(frozen=True)
class SponsorSummaryMail:
    gate: SponsorGate
    sender: MailSender
    reads_sponsors: bool  # an agent identity whose sponsors this replica reads

    def recipients(self) -> tuple[str, ...] | None:
        if not self.reads_sponsors:
            return ()
        if not self.gate.holds_read_list():
            return None
        return tuple(
            dict.fromkeys(a for s in self.gate.sponsors if (a := s.mail or s.user_principal_name))
        )

    async def find(self, letter: SummaryLetter, since: datetime) -> str | None:
        try:
            found = await self.sender.find(_mail(letter), since - LOOK_BACK)
        except SendUnknown:
            raise LetterUnknown(letter.send_id) from None
        return None if found is None else found.id

    async def send(self, letter: SummaryLetter) -> LetterSent:
        try:
            sent = await self.sender.send(_mail(letter))
        except SendUnknown:
            raise LetterUnknown(letter.send_id) from None
        except GraphError as exc:
            raise LetterRefused(f"{type(exc).__name__} {exc.status}") from None
        return LetterSent(sent.outcome.value, sent.sent_item_id)


def _mail(letter: SummaryLetter) -> OutgoingMail:
    return OutgoingMail(
        "new", letter.subject, letter.to, letter.html, send_id=letter.send_id, content_type="html"
    )

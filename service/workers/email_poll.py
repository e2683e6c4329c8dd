"""The email poll: the mailbox, once a minute for the whole fleet (``PollTurn``), through the ledger's
claim → settle → hold protocol. A mail notification polls at once, whatever the turn says."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from service.domain.filters import is_noise_mail
from service.delivery.hub import DeliveryHub
from service.delivery.claim_intents import ClaimIntents
from service.domain.message import InboundMessage, Source
from service.graph.client import GraphClient
from service.graph.errors import GraphError, GraphPayloadError
from service.graph.models import MailMessage
from service.ledger.claims.email_claims import EmailClaimer
from service.ledger.claims.email_claims import CursorStart
from service.ledger.fleet.poll_turns import PollTurn
from service.clock import Clock, utc_now
from service.storage.errors import StorageError
from service.domain.agent import AgentUser
from service.graph.inbound import mail_inbound
from service.workers.recorder import DeliveryRecorder

log = logging.getLogger(__name__)

MAX_MAIL_PAGES = 10  # 500 mails a cycle; a larger backlog surfaces its newest 500
# receivedDateTime has whole-second precision, and the claim moves the cursor to the newest mail it
# took, fetching only what is strictly newer next time. A mail landing later in that same second
# would then never be fetched, so mail from the last few seconds waits for the next cycle.
SETTLE_MARGIN = timedelta(seconds=5)


@dataclass
class EmailPoller:
    graph: GraphClient
    claimer: EmailClaimer[MailMessage]
    hub: DeliveryHub
    agent: AgentUser
    recorder: DeliveryRecorder
    max_pages: int = MAX_MAIL_PAGES
    clock: Clock = utc_now
    settle_margin: timedelta = SETTLE_MARGIN
    # The fleet's one cadence (None: this replica polls every cycle, as a lone replica would).
    turn: PollTurn | None = None
    # Writes what an acknowledging host is owed into its record before each claim write.
    intents: ClaimIntents | None = None
    _nudged: bool = False
    _cursor_started: bool = False

    def poll_now(self) -> None:
        """Graph announced mail (or said it missed some): the next cycle polls even if another replica
        polled within the interval."""
        self._nudged = True

    async def cycle(self) -> None:
        # A held batch waits too: settling it would be followed by a claim no target here can take.
        if not self.hub.can_take(Source.EMAIL):
            await self._start_cursor()
            return
        nudged, self._nudged = self._nudged, False
        # A batch this replica holds is settled by this replica's cycle alone: never skipped for a turn.
        if (
            self.turn is not None
            and not nudged
            and self.claimer.held is None
            and not await self.turn.take()
        ):
            return
        intent = self.intents.for_messages(self._deliverable) if self.intents is not None else None
        result = await self.claimer.run_cycle(self._fetch, intent)
        # The settled batch goes out before the cycle's failure is reported: the cursor is past it.
        await self._deliver(result.deliver)
        if result.error is not None:
            self._report(result.error)

    async def _start_cursor(self) -> None:
        """Until the cursor is known to exist, create it: mail from the container's first boot on is then
        pushed when the first host connects, not only mail from that moment (the seed's rule)."""
        if self._cursor_started or self.claimer.held is not None:
            return
        self._cursor_started = await self.claimer.start_cursor() is not CursorStart.UNKNOWN

    def _deliverable(self, mail: MailMessage) -> InboundMessage | None:
        """The mail as a host gets it; None for noise (claimed, so no replica fetches it again, never pushed)."""
        if is_noise_mail(
            mail.sender.address if mail.sender else None,
            mail.subject,
            mail.headers,
            agent_addresses=self.agent.addresses,
        ):
            return None
        return mail_inbound(mail)

    async def _deliver(self, batch: Sequence[MailMessage]) -> None:
        messages = [m for mail in batch if (m := self._deliverable(mail)) is not None]
        if not messages:
            return
        dispatches = await self.hub.dispatch(messages)
        await self.recorder.delivered(dispatches)

    @staticmethod
    def _report(error: Exception) -> None:
        """A known failure fails this cycle closed; anything else is a bug and stops the loop."""
        if isinstance(error, GraphError):
            log.warning(
                "mailbox read failed; nothing new claimed this cycle",
                extra={"error": type(error).__name__, "status": error.status},
            )
        elif isinstance(error, StorageError):
            log.warning(
                "email ledger unavailable; nothing new claimed this cycle",
                extra={"error": type(error).__name__},
            )
        else:
            raise error

    async def _fetch(self, since: datetime) -> Sequence[MailMessage]:
        """Every mail after ``since``: the claim moves the cursor to the newest, so nothing in between
        may be missing (an unreadable mail fails the fetch rather than being skipped past)."""
        collected: list[MailMessage] = []
        async for page in self.graph.mail.list_mail(since, max_pages=self.max_pages):
            if page.skipped:
                raise GraphPayloadError("an unreadable mail in the inbox page; retrying next cycle")
            collected.extend(page.items)
        cutoff = self.clock() - self.settle_margin
        settled = [m for m in collected if m.received_date_time <= cutoff]
        if len(settled) < len(collected):
            # Everything up to the cut is taken; the rest is strictly newer, so nothing is skipped.
            log.debug(
                "leaving %d mail(s) of the last seconds for the next cycle",
                len(collected) - len(settled),
            )
        return settled

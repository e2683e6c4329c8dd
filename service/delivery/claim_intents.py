"""The claim's intent: what an acknowledging host is owed is written to its record before the claim.

Order of writes for a message claimed for such a host (docs/delivery.md):

1. the intent, in ``deliveries/<host>.json``, naming the claim id the ledger is about to write (a chat's
   right after the claim decided on the cursor read that preceded the Graph read, or, when the claim
   reads the cursor itself, beside that read: service.ledger.claims.claim_intent.IntentAhead);
2. the claim, in the chat's or the mailbox's cursor (the ledger's compare-and-swap);
3. the push, on the host's session if this replica holds one;
4. the host's acknowledgement, which takes the entry out of the record (service.delivery.host_keeper).

A replica dying after 1 leaves an intent whose claim id never lands: it lapses. Dying after 2 or 3
leaves an intent whose claim id the cursor holds: the host is owed it, and whichever replica serves the
host next pushes it. A claim that loses its race takes its intents back out at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Generic, TypeVar

from service.clock import utc_now
from service.delivery.fault_points import FaultPoint, FaultPoints
from service.delivery.host_record import HostRecord, with_intents, without_claim
from service.delivery.host_records import HostRecords
from service.delivery.hub import DeliveryHub
from service.domain.message import InboundMessage
from service.storage.errors import StorageError

log = logging.getLogger(__name__)

M = TypeVar("M")
PLANS_KEPT = 1024


@dataclass
class ClaimIntents:
    """One replica's writer of intents; ``for_messages`` adapts it to a ledger's offered type."""

    hub: DeliveryHub
    records: HostRecords
    faults: FaultPoints = field(default_factory=FaultPoints)
    clock: Callable[[], datetime] = utc_now
    # claim id -> host -> its messages, until the claim settles (one whose outcome stays unknown is
    # settled by the cursor instead, so only the newest PLANS_KEPT are remembered)
    _planned: dict[str, dict[str, list[InboundMessage]]] = field(default_factory=dict)

    def for_messages(self, inbound: Callable[[M], InboundMessage | None]) -> ClaimIntentsOf[M]:
        return ClaimIntentsOf(self, inbound)

    def in_flight(self, claim_id: str) -> bool:
        """Whether this replica is writing that claim now (its intents are its own to push)."""
        return claim_id in self._planned

    async def before_write(self, claim_id: str, messages: Sequence[InboundMessage]) -> bool:
        plan = self.hub.reserve(messages)
        if not plan:
            return True
        now = self.clock()
        for host_id, owed in plan.items():

            def change(record: HostRecord, owed: list[InboundMessage] = owed) -> HostRecord:
                return with_intents(record, claim_id, owed, now)

            try:
                await self.records.update(host_id, change)
            except StorageError as exc:
                log.warning(
                    "delivery record did not take the claim's intent; nothing claimed this time",
                    extra={"host_id": host_id, "error": type(exc).__name__},
                )
                self.hub.unreserve(messages)
                await self._take_back(claim_id, plan)
                return False
        self._planned[claim_id] = plan
        while len(self._planned) > PLANS_KEPT:
            del self._planned[next(iter(self._planned))]
        self.faults.reached(FaultPoint.AFTER_INTENT)
        return True

    async def after_write(self, claim_id: str, landed: bool) -> None:
        plan = self._planned.pop(claim_id, None)
        if plan is None:
            return
        if landed:
            self.faults.reached(FaultPoint.AFTER_CLAIM)
            return
        self.hub.unreserve([m for owed in plan.values() for m in owed])
        await self._take_back(claim_id, plan)

    async def _take_back(self, claim_id: str, plan: dict[str, list[InboundMessage]]) -> None:
        """Best effort: an intent left behind lapses on its own (claim_lookup.INTENT_LAPSE_S)."""
        for host_id in plan:
            try:
                await self.records.update(host_id, lambda r: without_claim(r, claim_id))
            except StorageError:
                log.info(
                    "an intent whose claim did not land stays until it lapses",
                    extra={"host_id": host_id},
                )


@dataclass(frozen=True)
class ClaimIntentsOf(Generic[M]):
    """``ClaimIntents`` as a ledger's ``ClaimIntent[M]``: offered messages that are nobody's to deliver
    (the agent's own, system messages) map to None and have no intent."""

    intents: ClaimIntents
    inbound: Callable[[M], InboundMessage | None]

    async def before_write(self, claim_id: str, won: Sequence[M]) -> bool:
        return await self.intents.before_write(
            claim_id, [m for w in won if (m := self.inbound(w)) is not None]
        )

    async def after_write(self, claim_id: str, landed: bool) -> None:
        await self.intents.after_write(claim_id, landed)

"""The delivery sweep: one replica (the ``delivery_sweep`` lease) moves what a host that went away is owed
to another live host of the agent (issue 22 item 1, docs/delivery.md).

A host that comes back, through any replica, gets what it is owed from its own record; that is the
common case and needs no sweep. A host that does not come back (a laptop closed for the weekend, a
container that was replaced) would hold its messages forever, so once no replica has served it for
``move_after_s`` the sweep moves its owed messages to the live host seen most recently: written into
that host's record first, then out of the first one's (marked moved, so a late acknowledgement or a
return of the first host never makes a second delivery from that record). The replica serving the
destination reads its record within a refresh (``ENTRABOT_DELIVERY_REFRESH_S``) and pushes them.

Moving trades a possible duplicate for a certain loss: the first host may have written a message to
its own host and died before acknowledging it. That is why the bound is long (10 minutes by default,
``ENTRABOT_DELIVERY_MOVE_AFTER_S``) and why nothing is moved twice. Intents are settled first: only a
claim found in its cursor moves.

Every pass also settles the intents of any host that are older than ``SETTLE_AFTER_S``, served or not.
An intent's claim id is proof only while its cursor keeps it (the newest 32 claims of a chat): a
replica that died between its intent and the push leaves an intent that nobody else settles until the
host's stream opens again, and a busy chat could push the claim out of the cursor before then, leaving
the entry ambiguous (neither pushed nor dropped). Settled, it is simply owed. The host's own keeper
settles the intents of a host it serves as well; both writes are the same idempotent change.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from service.clock import Clock, utc_now
from service.delivery.claim_lookup import ClaimFate, ClaimLookup, note_dropped_intent
from service.delivery.host_keeper import HOLD_STALE_S
from service.delivery.host_record import (
    EntryState,
    HostRecord,
    PendingDelivery,
    moved_in,
    moved_out,
    moving,
    settled_intents,
)
from service.delivery.host_records import HostRecords
from service.ledger.fleet.leases import Lease
from service.storage.errors import StorageError
from service.telemetry.metrics import DeliveryMetrics

log = logging.getLogger(__name__)

ROLE = "delivery_sweep"
# Past any claim call in progress on a live replica (its intent is settled by that call, or by the
# host's keeper); well inside the time a chat takes to see 32 newer claims.
SETTLE_AFTER_S = 60.0


@dataclass
class DeliverySweep:
    lease: Lease
    records: HostRecords
    lookup: ClaimLookup
    interval_s: float = 60.0
    move_after_s: float = 600.0
    clock: Clock = utc_now
    monotonic: Callable[[], float] = time.monotonic
    metrics: DeliveryMetrics = field(kw_only=True)
    _next: float = float("-inf")

    async def cycle(self) -> None:
        if not await self.lease.keep():
            return
        now = self.monotonic()
        if now < self._next:
            return
        self._next = now + self.interval_s
        try:
            await self.sweep()
        except StorageError as exc:
            log.warning(
                "delivery sweep skipped: the records could not be listed",
                extra={"error": type(exc).__name__},
            )

    async def sweep(self) -> int:
        """One pass: the number of messages moved."""
        records: dict[str, HostRecord] = {}
        for host_id in await self.records.hosts():
            try:
                records[host_id] = await self.records.read(host_id)
            except StorageError:
                continue  # an unreadable record is reported by its reader; its host's messages stay put
        now = self.clock()
        for host_id, record in list(records.items()):
            if any(
                e.state is EntryState.INTENT and now - e.at >= timedelta(seconds=SETTLE_AFTER_S)
                for e in record.pending
            ):
                try:
                    records[host_id] = await self._settled(host_id, record)
                except StorageError:
                    continue  # settled on a later pass, or by the host's keeper
        stale = timedelta(seconds=HOLD_STALE_S)
        live = sorted(
            (r for r in records.values() if r.unseen_since(now, stale) is None and not r.full),
            key=lambda r: r.held_by.at if r.held_by else now,
            reverse=True,
        )
        moved = 0
        for host_id, record in records.items():
            since = record.unseen_since(now, stale)
            if (
                since is not None
                and record.pending
                and now - since >= timedelta(seconds=self.move_after_s)
            ):
                destination = next((r for r in live if r.host_id != host_id), None)
                moved += await self._moved_from(host_id, record, destination)
            elif any(e.moving_to is not None for e in record.pending):
                # A move an earlier pass began and did not finish, of a host served again: finished
                # all the same, since the host is never pushed what is bound elsewhere (push_due).
                moved += await self._moved_from(host_id, record, None)
        return moved

    async def _moved_from(
        self, host_id: str, record: HostRecord, destination: HostRecord | None
    ) -> int:
        """What ``host_id`` is owed, to ``destination`` (None: only the moves begun already)."""
        owed = await self._claimed(host_id, record)
        # A move an earlier pass began finishes to the same host.
        bound = [e for e in owed if e.moving_to is not None]
        free = [e for e in owed if e.moving_to is None]
        if free and destination is not None:
            to_host, keys = destination.host_id, [e.key for e in free]
            record = await self.records.update(host_id, lambda r: moving(r, keys, to_host))
            bound = [e for e in record.pending if e.moving_to is not None]
        moved = 0
        for target in dict.fromkeys(e.moving_to for e in bound if e.moving_to is not None):
            moved += await self._move(host_id, target, [e for e in bound if e.moving_to == target])
        return moved

    async def _claimed(self, host_id: str, record: HostRecord) -> list[PendingDelivery]:
        """The entries whose claim landed; intents that never will are dropped from the record."""
        record = await self._settled(host_id, record)
        return [e for e in record.pending if e.state is EntryState.LIVE and e.movable]

    async def _settled(self, host_id: str, record: HostRecord) -> HostRecord:
        """The record with its intents settled where their cursors tell: landed ones live, lapsed ones gone."""
        now = self.clock()
        landed: set[str] = set()
        failed: set[str] = set()
        for entry in record.pending:
            if entry.state is not EntryState.INTENT:
                continue
            for claim in entry.claims:  # its own, then those of the intents it replaced
                if claim in landed | failed:
                    continue
                fate = await self.lookup.fate(entry.model_copy(update={"claim": claim}), now)
                if fate is ClaimFate.LANDED:
                    landed.add(claim)
                    break
                if fate in (ClaimFate.NEVER, ClaimFate.AMBIGUOUS):
                    failed.add(claim)
                    if all(c in failed for c in entry.claims):
                        note_dropped_intent(fate, host_id, entry, self.metrics)
        if landed or failed:
            record = await self.records.update(
                host_id, lambda r: settled_intents(r, landed, failed)
            )
        return record

    async def _move(self, from_host: str, to_host: str, owed: list[PendingDelivery]) -> int:
        at = self.clock()
        try:
            await self.records.update(to_host, lambda r: moved_in(r, owed, from_host, at))
            await self.records.update(from_host, lambda r: moved_out(r, [e.key for e in owed]))
        except StorageError as exc:
            # They stay bound to that host here (moving_to), so the next pass finishes the same move;
            # moved_in skips what the destination has already.
            log.warning(
                "delivery move not finished; the next sweep finishes it",
                extra={"from_host": from_host, "to_host": to_host, "error": type(exc).__name__},
            )
            return 0
        log.info(
            "owed messages moved to another live host",
            extra={"from_host": from_host, "to_host": to_host, "count": len(owed)},
        )
        self.metrics.moved_deliveries.inc(len(owed))
        return len(owed)

"""The acknowledging hosts this replica serves: what each is owed, pushed until it acknowledges.

A host (a channel bridge naming its ``host_id``) may reach the fleet through any replica. When its push
stream opens here, this replica reads the host's record from the shared container and pushes every
message the host is owed that this session has not had; while the host stays, the record is read again
every ``refresh_s`` and a push unacknowledged after ``redeliver_after_s`` is sent once more (the rules:
service.delivery.host_rules). The host's acknowledgements are written to its record in batches
(service.delivery.host_acks). A host is held (``held_by`` in its record) while its push stream is open
here, so the sweep moves what it is owed only once nobody serves it. Intents (written before a claim)
are pushed only once their claim id is found in the cursor, except by the replica whose claim it is.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from service.background import Background
from service.clock import utc_now
from service.delivery.claim_lookup import ClaimLookup, settle_intents
from service.delivery.host_record import (
    HeldBy,
    HostRecord,
    PendingDelivery,
)
from service.delivery.host_acks import AckWriter
from service.delivery.host_records import HostRecords
from service.delivery.host_rules import (
    hold_change,
    refresh_due,
    settled_and_held,
    push_due,
    redelivery_reason,
)
from service.delivery.host_stats import AckStats, by_age
from service.delivery.hub import DeliveryHub, Handover
from service.domain.message import InboundMessage, MessageKey
from service.storage.errors import StorageError
from service.telemetry.metrics import DeliveryMetrics

log = logging.getLogger(__name__)

REDELIVER_AFTER_S = 15.0
REFRESH_S = 60.0
HOLD_RENEW_S = 300.0
# A hold not renewed for this long is a replica that died serving the host (renewals come every
# HOLD_RENEW_S, at the next refresh).
HOLD_STALE_S = HOLD_RENEW_S + 2 * REFRESH_S
TICK_S = 2.0


@dataclass
class _Held:
    session_id: str
    refreshed_at: float = float("-inf")  # monotonic
    syncing: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass
class HostKeeper:
    records: HostRecords
    lookup: ClaimLookup
    hub: DeliveryHub
    replica_id: str
    in_flight: Callable[[str], bool] = lambda claim_id: False  # ClaimIntents.in_flight
    # Told, after each acknowledgement written here, the entries that write took out of the record (never
    # blocking: AckReactions.offer queues the reaction to each); across the fleet one write takes each out.
    acknowledged_here: Callable[[list[PendingDelivery]], None] | None = None
    metrics: DeliveryMetrics = field(kw_only=True)
    background: Background = field(kw_only=True, default_factory=Background)
    clock: Callable[[], datetime] = utc_now
    monotonic: Callable[[], float] = time.monotonic
    redeliver_after_s: float = REDELIVER_AFTER_S
    refresh_s: float = REFRESH_S
    hold_renew_s: float = HOLD_RENEW_S
    _hosts: dict[str, _Held] = field(default_factory=dict)
    stats: AckStats = field(default_factory=AckStats)
    acks: AckWriter = field(init=False)

    def __post_init__(self) -> None:
        self.acks = AckWriter(self.records, self.background, self._acks_written)

    # --- what the hub and the sessions tell it ---

    def has_room(self, host_id: str) -> bool:
        """Whether the hub may claim more for this host (a host owed MAX_PENDING takes nothing new)."""
        record = self.records.cached(host_id)
        return record is None or not record.full

    def stream_opened(self, host_id: str, session_id: str) -> None:
        """The host's push stream opened here (a new session, or a resume): push what it is owed."""
        # A resume or a second session of a host held here keeps its pushes' count (hub.deliveries).
        current = self._hosts.get(host_id)
        if current is None or current.session_id != session_id:
            current = self._hosts[host_id] = _Held(session_id)
        current.refreshed_at = float("-inf")  # read it now: another replica may have written
        self._spawn(self.sync(host_id))

    def session_ended(self, host_id: str, session_id: str) -> None:
        current = self._hosts.get(host_id)
        if current is not None and current.session_id == session_id:
            del self._hosts[host_id]
            self.hub.deliveries.forget_pushes(host_id)
            self._spawn(self.records.release_hold(host_id, session_id, self.clock()))

    def pushed(self, host_id: str, session_id: str, message: InboundMessage) -> None:
        """A push of an owed message was taken by the host's session (told by its push target)."""
        if host_id in self._hosts:
            self.hub.deliveries.pushed(message, host_id, session_id, self.monotonic())

    async def acknowledge(self, host_id: str, keys: Iterable[tuple[str, str]]) -> None:
        """The host has these (written to its own host). Written to its record, batched."""
        self.acks.add(host_id, keys)

    async def owe(self, host_id: str, messages: Sequence[InboundMessage]) -> bool:
        """Claimed messages this host did not get (a sponsor wait of its ended without answering): owed to
        it from now on, pushed on its stream here or on its next one on any replica, until it acknowledges.
        False only when they are certainly not in its record; a write whose fate stays unknown counts as
        written (fail closed: given to another host too, the message could reach two)."""
        if not await self.records.owe(host_id, messages, self.clock()):
            return False
        if host_id in self._hosts:
            self._spawn(self.sync(host_id))
        return True

    # --- the loop ---

    async def cycle(self) -> None:
        """One pass over the hosts served here (the supervisor runs it every ``TICK_S``)."""
        for host_id in list(self._hosts):
            await self.sync(host_id)
        self._publish()

    async def sync(self, host_id: str) -> None:
        """Refresh the record when due, then push what this host's session is owed."""
        current = self._hosts.get(host_id)
        if current is None:
            return
        async with current.syncing:
            record = self.records.cached(host_id)
            streaming = self.hub.host_target(host_id) is not None
            due = self.monotonic() - current.refreshed_at >= self.refresh_s
            # A stream gone from a host held here is written down at once (the sweep waits on it).
            if (
                record is None
                or due
                or refresh_due(record, self.replica_id, current.session_id, streaming=streaming)
            ):
                try:
                    record = await self._refresh(host_id, current)
                except StorageError as exc:
                    log.warning(
                        "delivery record unavailable; its host's owed messages wait",
                        extra={"host_id": host_id, "error": type(exc).__name__},
                    )
                    return
            await self._push_owed(host_id, current, record)

    async def _refresh(self, host_id: str, current: _Held) -> HostRecord:
        record = await self.records.read(host_id)
        now = self.clock()
        # Unsettled intents are looked at again sooner than the refresh (claim_lookup.settle_intents).
        settled = await settle_intents(
            record,
            self.lookup,
            in_flight=self.in_flight,
            now=now,
            retry_s=self.redeliver_after_s,
            metrics=self.metrics,
        )
        landed, failed = settled.landed, settled.failed
        again_in = min(self.refresh_s, settled.again_in_s)
        # What serves a host is its push stream, not its session: a host whose network went away (a
        # laptop closed) leaves a session here until its idle timeout, and must not look held meanwhile.
        streaming = self.hub.host_target(host_id) is not None
        renew, unhold = hold_change(
            record,
            self.replica_id,
            current.session_id,
            streaming=streaming,
            now=now,
            renew_after=timedelta(seconds=self.hold_renew_s),
        )
        if landed or failed or renew or unhold:
            mine = HeldBy(
                replica=self.replica_id, session=current.session_id, at=now, active=streaming
            )
            record = await self.records.update(
                host_id, lambda r: settled_and_held(r, settled, mine, renew=renew, unhold=unhold)
            )
        current.refreshed_at = self.monotonic() - (self.refresh_s - again_in)
        return record

    async def _push_owed(self, host_id: str, current: _Held, record: HostRecord) -> None:
        target = self.hub.host_target(host_id)
        if target is None:
            return
        now = self.monotonic()
        for entry in record.pending:
            mark = self.hub.deliveries.push_of(entry.key, host_id)
            if not push_due(entry, mark, current.session_id, now, self.redeliver_after_s):
                continue
            handover = await target.deliver(entry.message)
            if handover is Handover.NOT_TAKEN:
                return  # the stream went away: the next session gets the rest
            if mark is not None:
                self.stats.redelivered += 1
                reason = redelivery_reason(mark, current.session_id)
                self.metrics.redeliveries.labels(reason=reason).inc()

    def _acks_written(
        self, host_id: str, keys: set[MessageKey], taken: list[PendingDelivery]
    ) -> None:
        """``taken``: what the write that landed took out of the record (service.delivery.host_acks)."""
        deliveries, here = self.hub.deliveries, host_id in self._hosts
        marks = [m for k in keys if here and (m := deliveries.acknowledged(k, host_id)) is not None]
        self.stats.observe(taken, marks, self.monotonic(), self.metrics)
        if taken and self.acknowledged_here is not None:
            self.acknowledged_here(taken)

    # --- what operators see ---

    def pending(self) -> list[PendingDelivery]:
        """Owed to the hosts this replica serves, as last read or written here."""
        return [e for h in self._hosts if (r := self.records.cached(h)) for e in r.pending]

    def owed_by_age(self, host_id: str) -> dict[str, int]:
        """What one host served here is owed, as last read or written here (for /readyz)."""
        record = self.records.cached(host_id) if host_id in self._hosts else None
        return by_age(record.pending if record is not None else [], self.clock())

    def status(self) -> dict[str, Any]:
        """For /readyz detail: never a readiness problem (the alert is on the metric)."""
        # Hosts whose push stream is open here: a host gone without closing its session stays in
        # ``_hosts`` until its idle timeout, and is not served meanwhile.
        served = sum(1 for h in self._hosts if self.hub.host_target(h) is not None)
        return self.stats.status(served, self.pending(), self.clock())

    def _publish(self) -> None:
        for bucket, count in by_age(self.pending(), self.clock()).items():
            self.metrics.pending_deliveries.labels(age=bucket).set(count)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        self.background.spawn(work, name="keeper:host")

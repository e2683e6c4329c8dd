"""The acknowledging hosts this replica serves: what each is owed, pushed until it acknowledges.

A host (a channel bridge naming its ``host_id``) may reach the fleet through any replica. When its push
stream opens here, this replica reads the host's record from the shared container and pushes every
message the host is owed that this session has not had: a claim some replica made for it and never
pushed (it died after the claim), or pushed into a session that ended before the host acknowledged.
While the host stays, the record is read again every ``refresh_s`` (what the sweep moved here, what
another replica claimed for it) and a push unacknowledged after ``redeliver_after_s`` is sent once more.
The host acknowledges each message after writing it to its own host (Claude Code's stdin); the
acknowledgements are written to the record, batched while a write is in flight, and only then is the
message counted as delivered. A host is held (``held_by`` in its record) while its push stream is open
here: once the stream is gone — even if the session lingers until its idle timeout, as it does for a
host whose network went away — the hold is marked inactive, so the sweep may move what it is owed.

Intents (written before a claim) are pushed only once their claim id is found in the cursor, except by
the replica whose claim it is, which pushes as soon as the claim lands (``DeliveryHub`` dispatch).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from service.background import Background
from service.clock import utc_now
from service.delivery.claim_lookup import ClaimFate, ClaimLookup, note_dropped_intent
from service.delivery.host_record import (
    MessageKey,
    EntryState,
    HeldBy,
    HostRecord,
    PendingDelivery,
    acknowledged,
    held,
    owed_after_claim,
    settled_intents,
)
from service.delivery.host_records import HostRecords
from service.delivery.host_rules import (
    held_here,
    hold_change,
    push_due,
    redelivery_reason,
)
from service.delivery.host_stats import AckStats, by_age
from service.delivery.hub import DeliveryHub, Handover
from service.domain.message import InboundMessage
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
# An intent younger than this belongs to a claim that is most likely still being written: it is left to
# its own replica's dispatch before anyone reads the cursor for it.
SETTLE_AFTER_S = 3.0


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
    in_flight: Callable[[str], bool] = lambda claim_id: (
        False
    )  # ClaimIntents.in_flight: a claim still being written here
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
    _acks: dict[str, list[MessageKey]] = field(default_factory=dict)  # host -> to write, in order
    _ack_writers: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    stats: AckStats = field(default_factory=AckStats)

    # --- what the hub and the sessions tell it ---

    def has_room(self, host_id: str) -> bool:
        """Whether the hub may claim more for this host (a host owed MAX_PENDING takes nothing new)."""
        record = self.records.cached(host_id)
        return record is None or not record.full

    def stream_opened(self, host_id: str, session_id: str) -> None:
        """The host's push stream opened here (a new session, or a resume): push what it is owed."""
        current = self._hosts.get(host_id)
        if current is None or current.session_id != session_id:
            # A resume or a second session of a host held here keeps its pushes' count (hub.deliveries).
            self._hosts[host_id] = _Held(session_id)
        self._hosts[host_id].refreshed_at = float(
            "-inf"
        )  # read the record now: another replica may have written
        self._spawn(self.sync(host_id))

    def session_ended(self, host_id: str, session_id: str) -> None:
        current = self._hosts.get(host_id)
        if current is not None and current.session_id == session_id:
            del self._hosts[host_id]
            self.hub.deliveries.forget_pushes(host_id)
            self._spawn(self._release(host_id, session_id))

    def pushed(self, host_id: str, session_id: str, message: InboundMessage) -> None:
        """A push of an owed message was taken by the host's session (told by its push target)."""
        if host_id in self._hosts:
            self.hub.deliveries.pushed(message, host_id, session_id, self.monotonic())

    async def acknowledge(self, host_id: str, keys: Iterable[tuple[str, str]]) -> None:
        """The host has these (written to its own host). Written to its record, batched."""
        self._acks.setdefault(host_id, []).extend(MessageKey(*k) for k in keys)
        writer = self._ack_writers.get(host_id)
        if writer is None or writer.done():
            self._ack_writers[host_id] = self.background.spawn(
                self._write_acks(host_id), name="keeper:acknowledgements"
            )

    async def owe(self, host_id: str, messages: Sequence[InboundMessage]) -> bool:
        """Claimed messages this host did not get (a sponsor wait of its ended without answering): owed to
        it from now on, pushed on its stream here or on its next one on any replica, until it acknowledges.
        False only when they are certainly not in its record; a write whose fate stays unknown counts as
        written (fail closed: given to another host too, the message could reach two)."""
        keys = {m.key for m in messages}
        claim = f"wait-{uuid.uuid4().hex}"
        try:
            await self.records.update(
                host_id, lambda r: owed_after_claim(r, claim, messages, self.clock())
            )
        except StorageError:
            try:
                record = await self.records.read(host_id)
            except StorageError:
                log.error(
                    "a sponsor wait's messages may or may not be owed to its host; not given to another",
                    extra={"host_id": host_id, "message_ids": [m.message_id for m in messages]},
                )
                return True
            if not keys <= {e.key for e in record.pending} | record.settled_keys():
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
            if (
                record is None
                or self.monotonic() - current.refreshed_at >= self.refresh_s
                or (not streaming and held_here(record, self.replica_id, current.session_id))
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
        landed: set[str] = set()
        failed: set[str] = set()
        # Unsettled intents are looked at again sooner than the refresh: a young one in SETTLE_AFTER_S,
        # one whose claim has not landed yet (it may never) after the redelivery bound.
        again_in = self.refresh_s
        for entry in record.pending:
            if (
                entry.state is not EntryState.INTENT
                or entry.claim in landed | failed
                or self.in_flight(entry.claim)
            ):
                continue
            if now - entry.at < timedelta(seconds=SETTLE_AFTER_S):
                again_in = min(again_in, SETTLE_AFTER_S)
                continue
            fate = await self.lookup.fate(entry, now)
            if fate in (ClaimFate.NOT_YET, ClaimFate.UNKNOWN):
                again_in = min(again_in, self.redeliver_after_s)
            if fate is ClaimFate.LANDED:
                landed.add(entry.claim)
            elif fate in (ClaimFate.NEVER, ClaimFate.AMBIGUOUS):
                failed.add(entry.claim)
                note_dropped_intent(fate, host_id, entry, self.metrics)
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

            def change(r: HostRecord) -> HostRecord:
                r = settled_intents(r, landed, failed)
                if renew or (unhold and held_here(r, self.replica_id, current.session_id)):
                    return held(r, mine)
                return r

            record = await self.records.update(host_id, change)
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

    async def _write_acks(self, host_id: str) -> None:
        while self._acks.get(host_id):
            keys = set(self._acks.pop(host_id))
            taken: list[PendingDelivery] = []

            def change(r: HostRecord) -> HostRecord:
                # Applied to the record each attempt read; the write that lands is the one applied last, so
                # ``taken`` ends as what this replica's write took out of ``pending`` (none when another
                # write, or an earlier attempt of this one whose answer was lost, already had).
                taken[:] = [e for e in r.pending if e.key in keys]
                return acknowledged(r, keys)

            try:
                await self.records.update(host_id, change)
            except StorageError as exc:
                log.warning(
                    "acknowledgements not written; the host is pushed these again and acknowledges again",
                    extra={"host_id": host_id, "count": len(keys), "error": type(exc).__name__},
                )
                return
            self._observe_acks(host_id, keys, taken)
            if taken and self.acknowledged_here is not None:
                self.acknowledged_here(taken)

    def _observe_acks(
        self, host_id: str, keys: set[MessageKey], taken: list[PendingDelivery]
    ) -> None:
        """``taken``: what the write that landed took out of the record. Only those count as delivered: a
        repeated acknowledgement, or one another replica wrote first, finds nothing left to take."""
        held_here = host_id in self._hosts
        now = self.monotonic()
        by_key = {e.key: e for e in taken}
        for key in keys:
            mark = self.hub.deliveries.acknowledged(key, host_id) if held_here else None
            entry = by_key.get(key)
            if entry is not None:
                self.stats.acknowledged += 1
            if mark is not None:
                self.stats.latencies.append(max(now - mark.first_at, 0.0))
            if mark is not None:
                self.metrics.ack_latency.observe(max(now - mark.first_at, 0.0))
            if entry is not None:
                self.metrics.deliveries.labels(
                    "push", entry.message.source.value, "delivered"
                ).inc()

    async def _release(self, host_id: str, session_id: str) -> None:
        """Best effort: a host whose session ended here is not held by this replica any more (the sweep
        moves what it is owed to another host only once nobody holds it)."""

        now = self.clock()

        def change(r: HostRecord) -> HostRecord:
            holder = r.held_by
            mine = holder is not None and holder.session == session_id and holder.active
            return (
                held(r, holder.model_copy(update={"active": False, "at": now}))
                if mine and holder
                else r
            )

        try:
            await self.records.update(host_id, change)
        except StorageError:
            pass
        self.records.forget(host_id)

    # --- what operators see ---

    def pending(self) -> list[PendingDelivery]:
        """Owed to the hosts this replica serves, as last read or written here."""
        return [
            e for h in self._hosts if (r := self.records.cached(h)) is not None for e in r.pending
        ]

    def pending_by_age(self) -> dict[str, int]:
        return by_age(self.pending(), self.clock())

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
        for bucket, count in self.pending_by_age().items():
            self.metrics.pending_deliveries.labels(age=bucket).set(count)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        self.background.spawn(work, name="keeper:host")

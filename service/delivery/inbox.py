"""The inbox: what the fleet claimed for a host without pushes, handed over by a tool call it makes in a
loop, exactly once as long as it passes each result's cursor to its next call (SPEC §11).

The host's delivery record (service.delivery.host_record, one per host, as for a push host) is where
its messages wait. A call:

1. acknowledges what its cursor names (the entries the previous call returned) and renews the host's
   hold, in one conditional write: a write that lands with the ETag this replica last saw proves its
   copy was current, so a busy host costs no read per call (inbox_rules.Call);
2. returns what the record owes, oldest first, or waits for it up to the bound the host can wait;
   what it returns stays owed until a later call's cursor names it, so a call the host cancelled or
   that timed out never counts as delivered, and the same entries come back through any replica.

Between calls the host is still a delivery target: its hold (``held_by.session == "inbox"``) keeps it
one for the retention window on every replica, found by a scan of the records (``cycle``). While its
calls go to one replica, the others leave its messages to that one (inbox_rules.calling_elsewhere), so
a waiting call is woken by its own replica's claim at once rather than at its next look at the record
(``poll_s``). Past the window the host stops being a target and the delivery sweep moves what it was
owed, as for a push host that went away; the next call reports that as a gap.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from service.clock import utc_now
from service.delivery.claim_lookup import ClaimLookup, settle_intents
from service.delivery.host_record import EntryState, HostRecord, PendingDelivery, settled_intents
from service.delivery.host_records import HostRecords
from service.delivery.host_stats import by_age
from service.delivery.hub import DeliveryHub, Handover
from service.delivery.inbox_rules import (
    Call,
    CursorError,
    batch,
    calling_elsewhere,
    inbox_hold,
    is_inbox_host,
    parse_cursor,
    render_cursor,
)
from service.delivery.inbox_target import InboxHost, InboxTarget
from service.domain.message import InboundMessage
from service.storage.errors import StorageError
from service.telemetry.metrics import DeliveryMetrics

log = logging.getLogger(__name__)

RETENTION_S = 3600.0
MAX_WAIT_S = 50.0  # under the 60 s tool timeout of Codex and Copilot CLI
POLL_S = 5.0
RENEW_S = 60.0
BUSY_S = 3 * RENEW_S
SCAN_S = 30.0
BATCH_LIMIT = 20


@dataclass(frozen=True)
class Received:
    """One call's answer: ``entries`` and the cursor that acknowledges exactly them."""

    entries: list[PendingDelivery]
    cursor: str
    more: bool  # more is owed beyond this batch: call again at once
    gap: int  # messages moved to another host while this one was away, not told before
    waited_s: float


@dataclass(frozen=True)
class InboxTiming:
    retention_s: float = RETENTION_S  # ENTRABOT_INBOX_RETENTION_S
    max_wait_s: float = MAX_WAIT_S  # ENTRABOT_INBOX_MAX_WAIT_S
    poll_s: float = POLL_S  # a waiting call's look at the record, for what another replica claimed
    renew_s: float = RENEW_S  # a calling host's hold is written at most this often
    busy_s: float = BUSY_S  # a hold younger than this: the host calls that replica now
    scan_s: float = SCAN_S
    batch_limit: int = BATCH_LIMIT


@dataclass
class Inbox:
    records: HostRecords
    lookup: ClaimLookup
    hub: DeliveryHub
    replica_id: str
    metrics: DeliveryMetrics = field(kw_only=True)
    in_flight: Callable[[str], bool] = lambda claim_id: False  # ClaimIntents.in_flight
    acknowledged_here: Callable[[list[PendingDelivery]], None] | None = None
    clock: Callable[[], datetime] = utc_now
    monotonic: Callable[[], float] = time.monotonic
    timing: InboxTiming = InboxTiming()
    _hosts: dict[str, InboxHost] = field(default_factory=dict)
    _next_scan: float = float("-inf")

    # --- a call ---

    async def receive(
        self, host_id: str, cursor: str | None, wait_s: float, about: dict[str, str] | None = None
    ) -> Received:
        """Raises CursorError (a cursor not this host's) or StorageError (its record unavailable)."""
        host = self._host(host_id)
        if about:
            host.about = about
        # A newer call of the host ends an older one still waiting here: the host gave up on that one
        # (its connection went, and the SDK does not cancel a handler for that), and would otherwise
        # wait behind it for up to a whole wait.
        turn = host.next_turn()
        async with host.lock:
            host.waiting += 1
            try:
                wait = max(0.0, min(wait_s, self.timing.max_wait_s))
                return await self._receive(host, cursor, wait, turn)
            except CursorError:
                self.metrics.inbox_calls.labels(outcome="refused").inc()
                raise
            except StorageError:
                self.metrics.inbox_calls.labels(outcome="unavailable").inc()
                raise
            finally:
                host.waiting -= 1

    async def _receive(
        self, host: InboxHost, cursor: str | None, wait_s: float, turn: int
    ) -> Received:
        started = self.monotonic()
        record, gap = await self._start(host, cursor)
        deadline = started + wait_s
        while True:
            host.wake.clear()  # before the look: a claim after it wakes the wait below
            record = self.records.cached(host.host_id) or record
            record = await self._settle(host, record)
            entries, more = batch(record, self.timing.batch_limit, host.landed)
            left = deadline - self.monotonic()
            if entries or left <= 0 or host.turn != turn:
                break
            try:
                await asyncio.wait_for(host.wake.wait(), min(left, self.timing.poll_s))
            except TimeoutError:
                record = await self.records.read(host.host_id)  # another replica may have claimed
        self.metrics.inbox_calls.labels(outcome="messages" if entries else "empty").inc()
        return Received(
            entries,
            render_cursor(record.tag, (e.seq for e in entries)),
            more,
            gap,
            round(self.monotonic() - started, 3),
        )

    async def _start(self, host: InboxHost, cursor: str | None) -> tuple[HostRecord, int]:
        """The record after this call's write, and the gap to report."""
        record = self.records.cached(host.host_id)
        fresh = record is None
        if record is None:
            record = await self.records.read(host.host_id)
        try:
            seqs = parse_cursor(cursor, record) if cursor else frozenset[int]()
        except CursorError:
            if fresh:
                raise
            record, fresh = await self.records.read(host.host_id), True
            seqs = parse_cursor(cursor or "", record)
        now = self.clock()
        call = Call(
            seqs,
            inbox_hold(self.replica_id, now, self.timing.retention_s),
            timedelta(seconds=self.timing.renew_s),
            secrets.token_hex(3),
        )
        if not fresh and call.apply(record) == record:
            record = await self.records.read(host.host_id)  # nothing to write: look at it afresh
        taken = [e for e in record.pending if e.seq in seqs]
        gap = record.moved_untold
        record = await self.records.update(host.host_id, call.apply)
        host.called(now, record)
        if taken:
            host.forget_landed(e.key for e in taken)
            if self.acknowledged_here is not None:
                self.acknowledged_here(taken)
        return record, gap

    async def _settle(self, host: InboxHost, record: HostRecord) -> HostRecord:
        """Intents another replica wrote: made live (or dropped) where their cursors tell."""
        if not any(
            e.state is EntryState.INTENT and e.key not in host.landed for e in record.pending
        ):
            return record
        found = await settle_intents(
            record,
            self.lookup,
            in_flight=self.in_flight,
            now=self.clock(),
            retry_s=self.timing.poll_s,
            metrics=self.metrics,
            young_s=0.0,  # a waiting host: the cursor tells at once whether another replica's claim landed
        )
        if not (found.landed or found.failed):
            return record
        return await self.records.update(
            host.host_id, lambda r: settled_intents(r, found.landed, found.failed)
        )

    # --- the targets ---

    async def handed(self, host_id: str, message: InboundMessage) -> Handover:
        """The host's target here was handed a claimed message (InboxTarget.deliver)."""
        record = self.records.cached(host_id)
        if record is not None and record.entry(message.key) is not None:
            # Reserved for the host: its intent is in the record and its claim has landed.
            host = self._hosts.get(host_id)
            if host is not None:
                host.landed_here(message.key)
            return Handover.TAKEN
        # Handed back by another target (a sponsor wait that could not answer): owed from now on.
        return Handover.TAKEN if await self.owe(host_id, [message]) else Handover.NOT_TAKEN

    async def owe(self, host_id: str, messages: Sequence[InboundMessage]) -> bool:
        """Claimed messages this host did not get (a sponsor wait of its that ended unanswered):
        owed to it from now on (HostRecords.owe says when that is certainly not written)."""
        if not await self.records.owe(host_id, messages, self.clock()):
            return False
        host = self._hosts.get(host_id)
        if host is not None:
            host.wake.set()
        return True

    def takes_for(self, host_id: str) -> bool:
        """Whether this replica claims for the host now (InboxTarget.is_alive)."""
        host = self._hosts.get(host_id)
        if host is None:
            return False
        record = self.records.cached(host_id) or host.view
        if record is not None and record.full:
            return False
        if host.waiting:
            return True
        now = self.clock()
        if record is not None and calling_elsewhere(
            record, self.replica_id, now, self.timing.busy_s
        ):
            return False
        return self.knows(host_id)

    def knows(self, host_id: str) -> bool:
        """Whether the host called within the retention window, as far as this replica knows."""
        host = self._hosts.get(host_id)
        if host is None:
            return False
        now = self.clock()
        if host.last_call is not None and now - host.last_call < timedelta(
            seconds=self.timing.retention_s
        ):
            return True
        return host.view is not None and is_inbox_host(host.view, now)

    def _host(self, host_id: str) -> InboxHost:
        host = self._hosts.get(host_id)
        if host is None:
            host = self._hosts[host_id] = InboxHost(host_id)
            self.hub.register(InboxTarget(self, host_id))
            self._publish()
        return host

    # --- the scan (the supervisor runs ``cycle``) ---

    async def cycle(self) -> None:
        """Every ``scan_s``: the inbox hosts of the fleet, so this replica claims for them too."""
        if self.monotonic() < self._next_scan:
            return
        self._next_scan = self.monotonic() + self.timing.scan_s
        now = self.clock()
        for host_id in await self.records.hosts():
            host = self._hosts.get(host_id)
            if host is not None and host.waiting:
                continue  # calling here: this replica's copy is the freshest
            try:
                record = await self.records.read(host_id)
            except StorageError:
                continue  # its reader logs it; looked at again next scan
            if is_inbox_host(record, now):
                self._host(host_id).view = record
            elif host is not None:
                host.view = record
        for host_id in [h for h in self._hosts if not self.knows(h)]:
            del self._hosts[host_id]
            self.hub.unregister(InboxTarget.id_of(host_id))
        self._publish()

    # --- what operators see ---

    def status(self) -> list[dict[str, Any]]:
        """The inbox hosts this replica knows, for /readyz's host view: never a body or a token."""
        now = self.clock()
        shown = []
        for host_id, host in sorted(self._hosts.items()):
            record = self.records.cached(host_id) or host.view
            shown.append(
                host.shown(
                    claims_here=self.takes_for(host_id),
                    owed=by_age(record.pending if record is not None else [], now),
                )
            )
        return shown

    def _publish(self) -> None:
        self.metrics.inbox_hosts.set(len(self._hosts))

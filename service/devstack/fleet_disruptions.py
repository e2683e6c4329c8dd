"""The plan's disruptions, done to a running fleet: a replica is SIGKILLed, SIGTERMed or restarted at
its time, and stopping the holder of a fleet role's lease times the takeover from the lease records.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Sequence
from datetime import datetime

from service.clock import utc_now
from service.devstack.channel_host import ChannelHost
from service.devstack.delivery_account import KillRecord
from service.devstack.fleet import LocalFleet, ReplicaProcess
from service.devstack.fleet_plan import POLL_STEP_S, Disruption, DisruptionKind
from service.devstack.fleet_result import DisruptionRecord, TakeoverRecord
from service.devstack.ledger_reader import LedgerReader
from service.ledger.fleet.leases import LeaseRecord, lease_key

LEASE_POLL_S = (
    0.1  # a takeover is timed from the records; this only bounds how late the harness sees it
)
HOST_RECONNECT_WAIT_S = 20.0

# Kubernetes gives 30 s; a replica must exit by itself well inside it, else it is SIGKILLed.
SIGTERM_GRACE_S = 10.0


class Disruptor:
    """Does disruptions to ``fleet``'s replicas and records each: the kills (with the ledger as it
    was right after), what each disruption did, and the takeovers it timed. ``hosts`` are the run's
    hosts, by which a disruption may name its replica."""

    def __init__(
        self,
        fleet: LocalFleet,
        hosts: Sequence[ChannelHost],
        *,
        takeover_wait_s: float,
    ) -> None:
        self.fleet = fleet
        self.hosts = hosts
        self.takeover_wait_s = takeover_wait_s
        self.kills: list[KillRecord] = []
        self.records: list[DisruptionRecord] = []
        self.takeovers: list[TakeoverRecord] = []
        self._stopped: list[ReplicaProcess] = []

    async def run(
        self, disruptions: Sequence[Disruption], traffic_began: float, ledger: LedgerReader
    ) -> None:
        """Each disruption at its time after ``traffic_began`` (monotonic), then every takeover watch."""
        watches: list[asyncio.Task[TakeoverRecord]] = []
        for disruption in sorted(disruptions, key=lambda d: d.at_s):
            wait = traffic_began + disruption.at_s - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            watch = await self._apply(disruption, ledger)
            if watch is not None:
                watches.append(watch)
        for watch in watches:
            self.takeovers.append(await watch)

    async def _apply(
        self, disruption: Disruption, ledger: LedgerReader
    ) -> asyncio.Task[TakeoverRecord] | None:
        """Do it; stopping a lease role's holder returns the task that watches for its successor."""
        member = await self._target(disruption, ledger)
        on_it = tuple(h.name for h in self.hosts if h.connected_to == member.mcp_url)
        kind = disruption.kind
        took = 0.0
        exited_by_itself = True
        watch: asyncio.Task[TakeoverRecord] | None = None
        if kind is DisruptionKind.SIGKILL:
            member.kill()
            at = utc_now()
            stopped = time.monotonic()
            # Read right away: what the killed replica claimed is in the ledger now, and it pushes
            # nothing more. (Claims others make meanwhile they push themselves.)
            self.kills.append(KillRecord(member.name, at, await ledger.snapshot()))
            self._stopped.append(member)
            if disruption.lease_role is not None:
                watch = asyncio.create_task(
                    self._watch_takeover(disruption.lease_role, member, at, stopped, ledger)
                )
        elif kind is DisruptionKind.SIGTERM:
            at = utc_now()
            stopped = time.monotonic()
            took = await asyncio.to_thread(member.terminate, SIGTERM_GRACE_S)
            exited_by_itself = member.proc is not None and member.proc.returncode != -signal.SIGKILL
            self._stopped.append(member)
            if disruption.lease_role is not None:
                watch = asyncio.create_task(
                    self._watch_takeover(disruption.lease_role, member, at, stopped, ledger)
                )
        else:
            at = utc_now()
            began = time.monotonic()
            member.start()
            await asyncio.to_thread(member.wait_ready)
            took = time.monotonic() - began
            if member in self._stopped:
                self._stopped.remove(member)
        self.records.append(DisruptionRecord(kind, member.name, at, took, on_it, exited_by_itself))
        return watch

    async def _watch_takeover(
        self,
        role: str,
        stopped: ReplicaProcess,
        stopped_at: datetime,
        stopped_mono: float,
        ledger: LedgerReader,
    ) -> TakeoverRecord:
        """Read the role's lease until another replica's record is there (bounded by ``takeover_wait_s``)."""
        last = await ledger.lease(role)
        last_expires = last.expires_at if last is not None and last.holder == stopped.name else None
        deadline = stopped_mono + self.takeover_wait_s
        while time.monotonic() < deadline:
            record = await ledger.lease(role)
            if record is not None and record.holder != stopped.name:
                return TakeoverRecord(
                    role,
                    stopped.name,
                    stopped_at,
                    last_expires,
                    record.holder,
                    record.renewed_at,
                    time.monotonic() - stopped_mono,
                )
            await asyncio.sleep(LEASE_POLL_S)
        return TakeoverRecord(role, stopped.name, stopped_at, last_expires)

    async def _target(self, disruption: Disruption, ledger: LedgerReader) -> ReplicaProcess:
        members = self.fleet.members
        if disruption.lease_role is not None:
            return await self._holder(disruption.lease_role, ledger)
        if disruption.replica is not None:
            named = [m for m in members if m.name == disruption.replica]
            if not named:
                raise ValueError(
                    f"no replica named {disruption.replica!r}; the fleet has "
                    f"{[m.name for m in members]}"
                )
            return named[0]
        if disruption.host is None:
            if disruption.kind is not DisruptionKind.RESTART or not self._stopped:
                raise ValueError(
                    f"{disruption} names neither a host nor a replica, and there is nothing to restart"
                )
            return self._stopped[-1]
        host = next((h for h in self.hosts if h.name == disruption.host), None)
        if host is None:
            raise ValueError(
                f"no host named {disruption.host!r}; the run has {[h.name for h in self.hosts]}"
            )
        # The host may be between replicas right now: wait (bounded) until it holds a live one.
        deadline = time.monotonic() + HOST_RECONNECT_WAIT_S
        while time.monotonic() < deadline:
            live = [m for m in members if m.alive and m.mcp_url == host.connected_to]
            if live:
                return live[0]
            await asyncio.sleep(POLL_STEP_S)
        raise TimeoutError(f"{host.name} held no live replica for {HOST_RECONNECT_WAIT_S:.0f} s")

    async def _holder(self, role: str, ledger: LedgerReader) -> ReplicaProcess:
        """The live replica named in the role's unexpired lease (a bounded wait until there is one)."""
        deadline = time.monotonic() + self.takeover_wait_s
        record: LeaseRecord | None = None
        while time.monotonic() < deadline:
            record = await ledger.lease(role)
            if record is not None and not record.expired(utc_now()):
                live = [m for m in self.fleet.members if m.alive and m.name == record.holder]
                if live:
                    return live[0]
            await asyncio.sleep(LEASE_POLL_S)
        raise TimeoutError(
            f"no live replica held {lease_key(role)} within {self.takeover_wait_s:.0f} s "
            f"(last record: {record})"
        )

"""One supervisor for every background loop (structured concurrency).

A cycle is expected to handle the failures it knows (Graph errors, storage errors) by failing closed
for that cycle. An exception that escapes a cycle is a bug: the loop stops, stays visible as FAILED in
``/readyz``, ``/healthz`` and ``entrabot_loop_up``, and Kubernetes restarts the pod — it is never
swallowed and retried forever.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import Enum

from service.telemetry.metrics import LoopMetrics

log = logging.getLogger(__name__)

Cycle = Callable[[], Awaitable[None]]


class LoopState(str, Enum):
    PENDING = "pending"
    RUNNING = "running"
    FAILED = "failed"
    STOPPED = "stopped"


@dataclass
class LoopStatus:
    name: str
    state: LoopState = LoopState.PENDING
    cycles: int = 0
    last_started: float | None = None  # monotonic
    error: str | None = None


@dataclass
class _Loop:
    name: str
    interval_s: float
    jitter_s: float
    cycle: Cycle
    wake: Callable[[], Awaitable[None]] | None
    status: LoopStatus
    first_after_s: float = 0.0


@dataclass
class Supervisor:
    metrics: LoopMetrics
    rng: random.Random = field(default_factory=random.Random)
    _loops: list[_Loop] = field(default_factory=list)
    _stopping: asyncio.Event = field(default_factory=asyncio.Event)

    def add(
        self,
        name: str,
        cycle: Cycle,
        *,
        interval_s: float,
        jitter_s: float = 0.0,
        wake: Callable[[], Awaitable[None]] | None = None,
        first_after_s: float = 0.0,
    ) -> None:
        """Start ``cycle`` every ``interval_s`` (± jitter so replicas spread out), counted from the
        start of the previous cycle, so a slow cycle does not stretch the cadence.

        ``wake``, when given, ends the sleep early (e.g. a host connected to an idle replica).
        ``first_after_s`` delays the first cycle (one that already ran during start-up).
        """
        self._loops.append(
            _Loop(name, interval_s, jitter_s, cycle, wake, LoopStatus(name), first_after_s)
        )

    @property
    def statuses(self) -> list[LoopStatus]:
        return [loop.status for loop in self._loops]

    @property
    def healthy(self) -> bool:
        return all(s.state is LoopState.RUNNING for s in self.statuses)

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        """Run every loop until ``stop()``; a failed loop does not take the others down."""
        async with asyncio.TaskGroup() as group:
            for loop in self._loops:
                group.create_task(self._run_loop(loop), name=f"loop:{loop.name}")

    async def _run_loop(self, loop: _Loop) -> None:
        status = loop.status
        status.state = LoopState.RUNNING
        self._gauge(loop.name, 1)
        due = time.monotonic() + loop.first_after_s
        try:
            if loop.first_after_s > 0:
                await self._sleep(loop, loop.first_after_s)
            while not self._stopping.is_set():
                started = time.monotonic()
                status.last_started = started
                self.metrics.loop_lag.labels(loop.name).set(max(0.0, started - due))
                await loop.cycle()
                status.cycles += 1
                self.metrics.loop_cycles.labels(loop.name, "ok").inc()
                interval = max(
                    0.0, loop.interval_s + self.rng.uniform(-loop.jitter_s, loop.jitter_s)
                )
                due = started + interval
                await self._sleep(loop, max(0.0, due - time.monotonic()))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - recorded and surfaced, never swallowed
            status.state = LoopState.FAILED
            status.error = f"{type(exc).__name__}: {exc}"
            self._gauge(loop.name, 0)
            self.metrics.loop_cycles.labels(loop.name, "crashed").inc()
            log.exception("loop crashed; the replica reports unhealthy", extra={"loop": loop.name})
            return
        status.state = LoopState.STOPPED
        self._gauge(loop.name, 0)

    async def _sleep(self, loop: _Loop, delay: float) -> None:
        waiters: list[asyncio.Future[object]] = [asyncio.ensure_future(self._stopping.wait())]
        if loop.wake is not None:
            waiters.append(asyncio.ensure_future(loop.wake()))
        try:
            await asyncio.wait(waiters, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()

    def _gauge(self, name: str, value: int) -> None:
        self.metrics.loop_up.labels(name).set(value)

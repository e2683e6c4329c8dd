"""Paces one replica's chat-message reads so the fleet's together stay inside Graph's budget.

Graph allows an app 20 chat-message reads a second per tenant, for every replica together (Teams
service limits, read, not run here: the emulator enforces them). A cold fleet's first sights, or a
burst of hints, would otherwise send every replica's reads at once. Each replica takes its share of
``FLEET_READS_PER_S`` (three quarters of the budget, the rest left for the tools and the sweep's
first sights), dividing by the number of readers in the roster, which changes as replicas come and
go — hand-written for that reason: a fixed-rate limiter would have to be rebuilt on every change.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

FLEET_READS_PER_S = 15.0


@dataclass
class ReadPacer:
    readers: Callable[[], int]  # how many replicas read chats now (at least 1)
    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    _next_free: float = float("-inf")
    _lock: asyncio.Lock | None = None

    @property
    def interval_s(self) -> float:
        return max(1, self.readers()) / FLEET_READS_PER_S

    async def wait(self) -> None:
        """Return when this replica may send its next read (reads are spaced, never dropped)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            now = self.monotonic()
            start = max(now, self._next_free)
            self._next_free = start + self.interval_s
        if start > now:
            await self.sleep(start - now)

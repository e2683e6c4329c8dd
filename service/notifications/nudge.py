"""Wake-ups for the supervisor's loops: a nudge that is never lost, and "whichever comes first"."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field


@dataclass
class Nudge:
    """A wake-up that is not lost: set while nobody waits, the next wait returns at once."""

    _event: asyncio.Event = field(default_factory=asyncio.Event)
    _later: asyncio.TimerHandle | None = None

    def set(self) -> None:
        self._event.set()

    def set_now_and_after(self, delay_s: float) -> None:
        """Wake now and once more ``delay_s`` after the latest call (one pending timer at most: each
        call moves it, so the last of a burst is still followed by a wake ``delay_s`` later)."""
        self._event.set()
        if self._later is not None:
            self._later.cancel()
        self._later = asyncio.get_running_loop().call_later(delay_s, self._event.set)

    async def wait(self) -> None:
        await self._event.wait()
        self._event.clear()


def first_of(*waits: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
    """A supervisor ``wake`` that returns when any of ``waits`` does."""

    async def wake() -> None:
        tasks = [asyncio.ensure_future(w()) for w in waits]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()

    return wake

"""Holds: admitted Graph requests on matching paths wait until the admin API releases them.

A request is held after it passed throttling, so it keeps whatever it holds (a mailbox's concurrency
slot) for as long as the test wants: the way to make "N requests in flight at once" happen over real
HTTP without timing anything.
"""

from __future__ import annotations

import asyncio
import re
import threading


class Holds:
    def __init__(self) -> None:
        self._pattern: re.Pattern[str] | None = None
        self._released = asyncio.Event()
        self._waiting = 0
        self._lock = threading.Lock()

    def hold(self, route_pattern: str) -> None:
        """From now on, admitted requests whose path matches ``route_pattern`` (a regex) wait."""
        try:
            compiled = re.compile(route_pattern)
        except re.error as exc:
            raise ValueError(f"route_pattern is not a valid regular expression: {exc}") from None
        with self._lock:
            self._pattern = compiled
            self._released = asyncio.Event()

    def release(self) -> int:
        """Let every held request go on and hold no more; returns how many were waiting."""
        with self._lock:
            self._pattern = None
            self._released.set()
            return self._waiting

    @property
    def waiting(self) -> int:
        with self._lock:
            return self._waiting

    async def wait(self, path: str) -> None:
        with self._lock:
            if self._pattern is None or not self._pattern.search(path):
                return
            released = self._released
            self._waiting += 1
        try:
            await released.wait()
        finally:
            with self._lock:
                self._waiting -= 1

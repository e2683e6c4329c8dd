"""The tenant's notion of "now": the wall clock, or a manual one tests move by hand.

Token lifetimes and message timestamps read this clock, so a test can expire a token or age a
message without sleeping. Throttling windows deliberately do not: they measure real request rates on
a monotonic clock, which a test replaces with ``ManualMonotonic`` to count instead of time.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(timezone.utc)


class ManualClock:
    """A clock that stands still until advanced; safe to move from a test thread while the server runs."""

    def __init__(self, start: datetime | None = None) -> None:
        start = start or datetime.now(timezone.utc)
        if start.tzinfo is None:
            raise ValueError(
                "ManualClock needs a timezone-aware start time; pass tzinfo=timezone.utc"
            )
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> datetime:
        with self._lock:
            self._now += timedelta(seconds=seconds)
            return self._now


class ManualMonotonic:
    """A monotonic clock that stands still until advanced: makes throttling tests count, not time."""

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        with self._lock:
            self._now += seconds
            return self._now

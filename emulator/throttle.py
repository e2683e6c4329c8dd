"""Graph's throttling: a per-app, per-tenant request budget over a sliding one-second window, and a
burst of forced 429s the admin API can order.

Windows run on the monotonic clock (real request rates), never on the tenant clock tests move.
Rejected requests count against the window too, as Graph's do: a client that ignores Retry-After and
keeps hammering stays throttled; one that waits as told gets through.
"""

from __future__ import annotations

import math
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Literal

from emulator.seed import ThrottleBudget

Bucket = Literal["chat_messages", "other"]
_WINDOW_S = 1.0


class Throttle:
    def __init__(self, budget: ThrottleBudget, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._limits: dict[Bucket, int] = {"chat_messages": budget.chat_messages_per_s, "other": budget.other_per_s}
        self._monotonic = monotonic
        self._windows: dict[tuple[str, Bucket], deque[float]] = defaultdict(deque)
        self._forced = 0
        self._forced_retry_after = 1
        self._lock = threading.Lock()

    def admit(self, app_id: str, bucket: Bucket) -> int | None:
        """None if the request may proceed, else the Retry-After seconds to answer with."""
        limit = self._limits[bucket]
        now = self._monotonic()
        with self._lock:
            window = self._windows[(app_id, bucket)]
            while window and window[0] <= now - _WINDOW_S:
                window.popleft()
            over = len(window) >= limit
            if len(window) < limit * 10:  # bounded: enough history to keep a hammering client throttled
                window.append(now)
            if not over:
                return None
            # Wait until enough of the window has aged out that a new request fits.
            oldest_blocking = window[len(window) - limit]
            return max(1, math.ceil(oldest_blocking + _WINDOW_S - now))

    def force(self, requests: int, retry_after_s: int) -> None:
        """The next ``requests`` Graph requests get 429 regardless of budget."""
        with self._lock:
            self._forced = requests
            self._forced_retry_after = retry_after_s

    def take_forced(self) -> int | None:
        with self._lock:
            if self._forced <= 0:
                return None
            self._forced -= 1
            return self._forced_retry_after

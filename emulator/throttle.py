"""Graph's throttling: the documented limits, each a sliding window (or a concurrency cap) keyed per
app per tenant and, where Graph says so, per user, per chat or per mailbox; plus a burst of forced
429s the admin API can order.

The figures come from the seed's ``ThrottleBudget`` (Microsoft's "Microsoft Graph service-specific
throttling limits" page, Teams and Outlook sections). As Graph does, a request is evaluated against
every limit that covers it, the first one exhausted throttles it, and a rejected request counts
against the windows too: a client that ignores Retry-After and keeps hammering stays throttled; one
that waits as told gets through. Retry-After is the time until the window has room, rounded up to
whole seconds as live tenants answer (5, 41, 315 s seen; Microsoft's Graph SDK's retry handler reads
whole seconds only); ``fractional_retry_after`` answers the exact fractional wait instead, for tests
and harnesses that would otherwise sleep a whole second per throttle (read, not run: Graph's
"Microsoft Graph throttling guidance" page gives Retry-After as a number of seconds).

Windows run on a monotonic clock (real request rates by default), never on the tenant clock tests
move; a test passes ``emulator.clock.ManualMonotonic`` to count requests without timing them.
"""

from __future__ import annotations

import math
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from emulator.seed import ThrottleBudget
from emulator.team_throttle import teams_limits

LimitName = Literal[
    "chat_message_reads",
    "chat_message_sends",
    "per_chat",
    "chats_per_user",
    "other",
    "mail_per_mailbox",
    "mail_concurrency",
    # Teams' team, channel and channel-message limits (emulator.team_throttle).
    "channel_message_reads",
    "channel_message_sends",
    "team_reads",
    "channel_lists",
    "per_team_or_channel",
]
_HISTORY_FACTOR = 10  # bounded: enough history to keep a hammering client throttled
# A concurrency slot frees when some request finishes, which nobody can predict: Outlook answers
# "ApplicationThrottled" with a short Retry-After; half a second is what the emulator names.
_CONCURRENCY_RETRY_S = 0.5


@dataclass(frozen=True)
class Limit:
    name: LimitName
    requests: int
    window_s: float  # 0 for a concurrency cap
    scope: str  # for people reading the stats

    def describe(self) -> dict[str, Any]:
        return {"requests": self.requests, "window_s": self.window_s, "scope": self.scope}


def limits_of(budget: ThrottleBudget) -> dict[LimitName, Limit]:
    if not budget.enabled:
        return {}
    candidates: list[tuple[LimitName, int | None, float, str]] = [
        ("chat_message_reads", budget.chat_messages_per_s, 1.0, "app"),
        ("chat_message_sends", budget.chat_message_sends_per_s, 1.0, "app"),
        ("per_chat", budget.per_chat_per_s, 1.0, "app and chat"),
        ("chats_per_user", budget.chats_per_user_per_s, 1.0, "app and user"),
        ("other", budget.other_per_s, 1.0, "app"),
        ("mail_per_mailbox", budget.mail_per_10_min, 600.0, "app and mailbox"),
        ("mail_concurrency", budget.mail_concurrent, 0.0, "app and mailbox, in flight"),
    ]
    candidates.extend(teams_limits(budget.teams))
    return {
        name: Limit(name, n, window, scope)
        for name, n, window, scope in candidates
        if n is not None
    }


@dataclass(frozen=True)
class Charge:
    """One limit a request is evaluated against, and the key it is counted under beside the app."""

    limit: LimitName
    key: str = ""


@dataclass
class _Counters:
    admitted: int = 0
    throttled: int = 0


class Throttle:
    def __init__(
        self,
        budget: ThrottleBudget,
        monotonic: Callable[[], float] = time.monotonic,
        *,
        fractional_retry_after: bool = False,
    ) -> None:
        self._limits = limits_of(budget)
        self._fractional = fractional_retry_after
        self._monotonic = monotonic
        self._windows: dict[tuple[str, LimitName, str], deque[float]] = defaultdict(deque)
        self._in_flight: dict[tuple[str, str], int] = defaultdict(int)
        self._counters: dict[LimitName, _Counters] = {name: _Counters() for name in self._limits}
        self._forced = 0
        self._forced_retry_after = 1
        self._lock = threading.Lock()

    def admit(self, app_id: str, charges: Sequence[Charge]) -> float | None:
        """None if the request may proceed, else the Retry-After seconds to answer with.

        A request admitted with a ``mail_concurrency`` charge holds a slot until ``release``."""
        now = self._monotonic()
        with self._lock:
            waits: list[float] = []
            windowed = [
                (c, self._limits[c.limit])
                for c in charges
                if c.limit in self._limits and c.limit != "mail_concurrency"
            ]
            for charge, limit in windowed:
                wait = self._count(self._windows[(app_id, charge.limit, charge.key)], limit, now)
                if wait is not None:
                    waits.append(wait)
                    self._counters[charge.limit].throttled += 1
            slot = next(
                (c for c in charges if c.limit == "mail_concurrency" and c.limit in self._limits),
                None,
            )
            if not waits and slot is not None:
                if self._in_flight[(app_id, slot.key)] >= self._limits["mail_concurrency"].requests:
                    waits.append(_CONCURRENCY_RETRY_S)
                    self._counters["mail_concurrency"].throttled += 1
                else:
                    self._in_flight[(app_id, slot.key)] += 1
                    self._counters["mail_concurrency"].admitted += 1
            if waits:
                return max(waits) if self._fractional else float(math.ceil(max(waits)))
            for charge, _ in windowed:
                self._counters[charge.limit].admitted += 1
            return None

    def release(self, app_id: str, charges: Sequence[Charge]) -> None:
        """The admitted request finished: free its concurrency slot."""
        with self._lock:
            for charge in charges:
                if (
                    charge.limit == "mail_concurrency"
                    and self._in_flight.get((app_id, charge.key), 0) > 0
                ):
                    self._in_flight[(app_id, charge.key)] -= 1

    @staticmethod
    def _count(window: deque[float], limit: Limit, now: float) -> float | None:
        while window and window[0] <= now - limit.window_s:
            window.popleft()
        over = len(window) >= limit.requests
        if len(window) < limit.requests * _HISTORY_FACTOR:
            window.append(now)
        if not over:
            return None
        # Wait until enough of the window has aged out that a new request fits.
        oldest_blocking = window[len(window) - limit.requests]
        return max(0.001, math.ceil((oldest_blocking + limit.window_s - now) * 1000) / 1000)

    def stats(self) -> dict[str, Any]:
        """Per limit: its figure, and how many requests it admitted and throttled."""
        with self._lock:
            return {
                "enabled": bool(self._limits),
                "limits": {
                    name: {
                        **limit.describe(),
                        "admitted": self._counters[name].admitted,
                        "throttled": self._counters[name].throttled,
                    }
                    for name, limit in self._limits.items()
                },
                "in_flight": sum(self._in_flight.values()),
                "forced_remaining": self._forced,
            }

    def reset(self) -> None:
        """Forget every window and counter (slots in flight stay held until their requests end)."""
        with self._lock:
            self._windows.clear()
            for name in self._counters:
                self._counters[name] = _Counters()

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

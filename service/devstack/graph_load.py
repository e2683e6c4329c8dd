"""The fleet's Graph load in a fleet run, as the emulator saw it: requests per route, how many were
answered 429, and the rate per route over a window.

Counted from the emulator's request log, not from the replicas' own metrics, so a request a replica
does not know it made (a retry inside a client) still counts. The seeded people's posts go through
Graph too, under the seed's public client app; Graph's budget is per app, so they are left out.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from emulator.stats import RECENT_LIMIT, RequestRecord

GRAPH_PREFIX = "/v1.0/"


@dataclass(frozen=True)
class GraphLoad:
    seconds: float
    by_route: dict[str, dict[str, int]]  # "GET /v1.0/me/chats" -> status -> count
    # False: the emulator's log (it keeps the most recent requests only) dropped some of the window.
    complete: bool
    throttled_at_s: tuple[float, ...] = ()  # when each 429 was answered, seconds into the window

    @property
    def requests(self) -> int:
        return sum(sum(statuses.values()) for statuses in self.by_route.values())

    @property
    def throttled(self) -> int:
        return sum(statuses.get("429", 0) for statuses in self.by_route.values())

    def rate_by_route(self) -> dict[str, float]:
        return {
            route: round(sum(statuses.values()) / self.seconds, 3)
            for route, statuses in self.by_route.items()
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "seconds": round(self.seconds, 1),
            "requests": self.requests,
            "requests_per_s": round(self.requests / self.seconds, 3),
            "throttled_429": self.throttled,
            "requests_per_s_by_route": self.rate_by_route(),
            "statuses_by_route": self.by_route,
            "throttled_by_5s": self.throttled_by(5.0),
            "log_complete": self.complete,
        }

    def throttled_by(self, bucket_s: float) -> dict[str, int]:
        """429s per ``bucket_s`` of the window, keyed by the bucket's start (seconds into the window)."""
        buckets = Counter(int(t // bucket_s * bucket_s) for t in self.throttled_at_s)
        return {str(start): n for start, n in sorted(buckets.items())}


def graph_load(
    records: Sequence[RequestRecord], *, people_app_id: str, start: float, end: float
) -> GraphLoad:
    """The replicas' Graph requests that arrived in [start, end) (monotonic, the emulator's clock)."""
    if end <= start:
        raise ValueError("a Graph load window must end after it starts")
    by_route: dict[str, Counter[str]] = defaultdict(Counter)
    throttled: list[float] = []
    for record in records:
        if record.app_id == people_app_id or not record.path.startswith(GRAPH_PREFIX):
            continue  # the people's own traffic, or Entra's token endpoint (not Graph's budget)
        if start <= record.monotonic < end:
            by_route[f"{record.method} {record.route}"][str(record.status)] += 1
            if record.status == 429:
                throttled.append(record.monotonic - start)
    # The log keeps the most recent RECENT_LIMIT requests: one shorter than that has dropped nothing.
    complete = len(records) < RECENT_LIMIT or records[0].monotonic <= start
    return GraphLoad(
        end - start,
        {route: dict(sorted(c.items())) for route, c in sorted(by_route.items())},
        complete,
        tuple(throttled),
    )

"""Request statistics: counts by route template and status, and a bounded list of recent requests."""

from __future__ import annotations

import threading
from collections import Counter, deque
from dataclasses import asdict, dataclass
from typing import Any

RECENT_LIMIT = 20_000


@dataclass(frozen=True)
class RequestRecord:
    method: str
    route: str  # the template, e.g. /v1.0/chats/{id}/messages
    path: str
    status: int
    app_id: str | None
    user_id: str | None
    monotonic: float
    wall: str  # ISO-8601 UTC
    duration_ms: float
    fault: bool
    throttled: bool


class RequestStats:
    def __init__(self) -> None:
        self._counts: Counter[tuple[str, int]] = Counter()
        self._recent: deque[RequestRecord] = deque(maxlen=RECENT_LIMIT)
        self._lock = threading.Lock()

    def record(self, record: RequestRecord) -> None:
        with self._lock:
            self._counts[(f"{record.method} {record.route}", record.status)] += 1
            self._recent.append(record)

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()
            self._recent.clear()

    def count(self, route: str, status: int | None = None) -> int:
        """Requests to ``route`` ("GET /v1.0/me/chats"), optionally only those answered with ``status``."""
        with self._lock:
            return sum(
                n
                for (r, s), n in self._counts.items()
                if r == route and (status is None or s == status)
            )

    def recent(self, limit: int | None = None) -> list[RequestRecord]:
        with self._lock:
            items = list(self._recent)
        return items if limit is None else items[-limit:]

    def snapshot(self, recent: int = 1000) -> dict[str, Any]:
        with self._lock:
            counts: dict[str, dict[str, int]] = {}
            for (route, status), n in sorted(self._counts.items()):
                counts.setdefault(route, {})[str(status)] = n
            items = list(self._recent)[-recent:] if recent else []
            total = sum(self._counts.values())
        return {"total": total, "counts": counts, "recent": [asdict(r) for r in items]}

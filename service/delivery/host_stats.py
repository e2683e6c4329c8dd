"""What operators see of the hosts a replica serves: owed messages by age, redeliveries, and the time
from a push to its acknowledgement (``/readyz`` detail and the pending gauge)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from service.delivery.deliveries import Push
from service.delivery.host_record import PendingDelivery
from service.telemetry.metrics import DeliveryMetrics


@dataclass
class AckStats:
    redelivered: int = 0
    acknowledged: int = 0
    latencies: deque[float] = field(default_factory=lambda: deque(maxlen=256))  # newest, seconds

    def observe(
        self, taken: list[PendingDelivery], marks: list[Push], now: float, metrics: DeliveryMetrics
    ) -> None:
        """An acknowledgement write landed: ``taken`` is what it took out of the record (only those
        count as delivered), ``marks`` the pushes this replica had made of what it acknowledged."""
        self.acknowledged += len(taken)
        for mark in marks:
            self.latencies.append(max(now - mark.first_at, 0.0))
            metrics.ack_latency.observe(max(now - mark.first_at, 0.0))
        for entry in taken:
            metrics.deliveries.labels("push", entry.message.source.value, "delivered").inc()

    def status(
        self, hosts_served: int, pending: list[PendingDelivery], now: datetime
    ) -> dict[str, Any]:
        latencies = sorted(self.latencies)
        return {
            "hosts_served": hosts_served,
            "pending_by_age": by_age(pending, now),
            "oldest_pending_s": round(
                max(((now - e.at).total_seconds() for e in pending), default=0.0), 1
            ),
            "redeliveries": self.redelivered,
            "acknowledged": self.acknowledged,
            "ack_latency_ms_p50": _ms(latencies, len(latencies) // 2),
            "ack_latency_ms_p99": _ms(latencies, len(latencies) * 99 // 100),
        }


def _ms(sorted_s: list[float], index: int) -> float | None:
    return round(sorted_s[min(index, len(sorted_s) - 1)] * 1000, 1) if sorted_s else None


def by_age(entries: Iterable[PendingDelivery], now: datetime) -> dict[str, int]:
    buckets = {"lt_15s": 0, "lt_60s": 0, "lt_300s": 0, "older": 0}
    for entry in entries:
        age = (now - entry.at).total_seconds()
        buckets[
            "lt_15s" if age < 15 else "lt_60s" if age < 60 else "lt_300s" if age < 300 else "older"
        ] += 1
    return buckets

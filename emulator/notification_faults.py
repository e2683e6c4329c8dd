"""Faults on outgoing change notifications, ordered through the admin API: drop, duplicate, delay or
reorder a fraction of them (from a seeded RNG, so runs repeat), at most ``count`` times per rule.
And the delivery counters the admin API reports.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from emulator.fault_rules import FiringRules

FaultAction = Literal["drop", "duplicate", "delay", "reorder"]


class NotificationFaultRule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: FaultAction
    fraction: float = Field(default=1.0, ge=0.0, le=1.0)
    count: int | None = Field(None, ge=1)
    delay_ms: int = Field(default=0, ge=0, le=600_000)  # for "delay"
    lifecycle: bool = False  # also hit lifecycle notifications


@dataclass(frozen=True)
class NotificationFault:
    action: FaultAction
    delay_ms: int


class NotificationFaults(FiringRules[NotificationFaultRule]):
    def pick(self, *, lifecycle: bool) -> NotificationFault | None:
        """The fault for one outgoing notification, if a rule hits it (the first that fires wins)."""
        active = self.fire(lambda rule: rule.lifecycle or not lifecycle, lambda rule: rule.fraction)
        return (
            None if active is None else NotificationFault(active.rule.action, active.rule.delay_ms)
        )


RETRY_SCHEDULES_KEPT = 100


class DeliveryStats:
    """Counts per notification (not per POST): sent, retried (one per repeated attempt), failed,
    and each fault; lifecycle notifications also by event; validations by outcome. And the waits
    between attempts of the last settled batches that needed retries, so the backoff itself can be
    checked, not only how often it was applied."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._retry_waits: deque[tuple[float, ...]] = deque(maxlen=RETRY_SCHEDULES_KEPT)
        self._lock = threading.Lock()

    def add_retry_waits(self, waits: list[float]) -> None:
        """The seconds waited before each repeated attempt of one batch, once it is sent or failed."""
        with self._lock:
            self._retry_waits.append(tuple(waits))

    def retry_waits(self) -> list[list[float]]:
        with self._lock:
            return [list(w) for w in self._retry_waits]

    def add(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._counts[key] += n

    def get(self, key: str) -> int:
        with self._lock:
            return self._counts[key]

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(sorted(self._counts.items()))

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()
            self._retry_waits.clear()

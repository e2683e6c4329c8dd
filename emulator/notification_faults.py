"""Faults on outgoing change notifications, ordered through the admin API: drop, duplicate, delay or
reorder a fraction of them (from a seeded RNG, so runs repeat), at most ``count`` times per rule.
And the delivery counters the admin API reports.
"""

from __future__ import annotations

import itertools
import random
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

FaultAction = Literal["drop", "duplicate", "delay", "reorder"]


class NotificationFaultRule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: FaultAction
    fraction: float = Field(default=1.0, ge=0.0, le=1.0)
    count: int | None = Field(None, ge=1)
    delay_ms: int = Field(default=0, ge=0, le=600_000)  # for "delay"
    lifecycle: bool = False  # also hit lifecycle notifications


@dataclass
class _Active:
    id: int
    rule: NotificationFaultRule
    remaining: int | None
    hits: int = 0


@dataclass(frozen=True)
class NotificationFault:
    action: FaultAction
    delay_ms: int


class NotificationFaults:
    def __init__(self, random_seed: int | None) -> None:
        self._random = random.Random(random_seed)
        self._rules: list[_Active] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def add(self, rule: NotificationFaultRule) -> int:
        with self._lock:
            active = _Active(next(self._ids), rule, rule.count)
            self._rules.append(active)
            return active.id

    def clear(self) -> int:
        with self._lock:
            n = len(self._rules)
            self._rules.clear()
            return n

    def describe(self) -> list[dict[str, object]]:
        with self._lock:
            return [{"id": a.id, "hits": a.hits, "remaining": a.remaining, **a.rule.model_dump()} for a in self._rules]

    def pick(self, *, lifecycle: bool) -> NotificationFault | None:
        """The fault for one outgoing notification, if a rule hits it (the first that fires wins)."""
        with self._lock:
            for active in list(self._rules):
                if lifecycle and not active.rule.lifecycle:
                    continue
                if self._random.random() >= active.rule.fraction:
                    continue
                active.hits += 1
                if active.remaining is not None:
                    active.remaining -= 1
                    if active.remaining <= 0:
                        self._rules.remove(active)
                return NotificationFault(active.rule.action, active.rule.delay_ms)
            return None


class DeliveryStats:
    """Counts per notification (not per POST): sent, retried (one per repeated attempt), failed,
    and each fault; lifecycle notifications also by event; validations by outcome."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()

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

"""The rule book both fault injectors share (requests: ``faults``; outgoing notifications:
``notification_faults``): numbered rules added and cleared through the admin API, each firing on a
matching item with its own probability from one seeded RNG (so runs repeat), at most ``count`` times."""

from __future__ import annotations

import itertools
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar


class CountedRule(Protocol):
    @property
    def count(self) -> int | None: ...

    def model_dump(self) -> dict[str, object]: ...


RuleT = TypeVar("RuleT", bound=CountedRule)


@dataclass
class ActiveRule(Generic[RuleT]):
    id: int
    rule: RuleT
    remaining: int | None
    hits: int = 0


class FiringRules(Generic[RuleT]):
    def __init__(self, random_seed: int | None) -> None:
        self._random = random.Random(random_seed)
        self._rules: list[ActiveRule[RuleT]] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def add(self, rule: RuleT) -> int:
        with self._lock:
            active = ActiveRule(next(self._ids), rule, rule.count)
            self._rules.append(active)
            return active.id

    def clear(self) -> int:
        with self._lock:
            n = len(self._rules)
            self._rules.clear()
            return n

    def describe(self) -> list[dict[str, object]]:
        with self._lock:
            return [
                {"id": a.id, "hits": a.hits, "remaining": a.remaining, **a.rule.model_dump()}
                for a in self._rules
            ]

    def fire(
        self, matches: Callable[[RuleT], bool], rate: Callable[[RuleT], float]
    ) -> ActiveRule[RuleT] | None:
        """The first matching rule whose roll succeeds (counted, and dropped when used up), or None."""
        with self._lock:
            for active in list(self._rules):
                if not matches(active.rule) or self._random.random() >= rate(active.rule):
                    continue
                active.hits += 1
                if active.remaining is not None:
                    active.remaining -= 1
                    if active.remaining <= 0:
                        self._rules.remove(active)
                return active
            return None

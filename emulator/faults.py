"""Fault injection: rules that make matching requests slow, fail, or fail after they took effect.

A rule hits a matching request with probability ``error_rate`` (from a seeded RNG, so runs repeat), at
most ``count`` times. ``after_commit`` runs the request and then replaces its response with the error:
the write happened but the caller cannot know, as when a response is lost on the wire.
"""

from __future__ import annotations

import itertools
import random
import re
import threading
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, field_validator


class FaultRule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    error_rate: float = Field(1.0, ge=0.0, le=1.0)
    status: int | None = Field(503, ge=400, le=599)  # None: delay only
    latency_ms: int = Field(0, ge=0, le=120_000)
    route_pattern: str | None = None  # regex searched in the request path
    method: str | None = None
    count: int | None = Field(None, ge=1)
    after_commit: bool = False
    retry_after: int | None = Field(None, ge=0)

    @field_validator("route_pattern")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"route_pattern is not a valid regular expression: {exc}") from None
        return value


@dataclass
class _Active:
    id: int
    rule: FaultRule
    pattern: re.Pattern[str] | None
    remaining: int | None
    hits: int = 0


@dataclass(frozen=True)
class Fault:
    rule_id: int
    status: int | None
    latency_ms: int
    after_commit: bool
    retry_after: int | None


class FaultInjector:
    def __init__(self, random_seed: int | None = None) -> None:
        self._random = random.Random(random_seed)
        self._rules: list[_Active] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def add(self, rule: FaultRule) -> int:
        with self._lock:
            active = _Active(next(self._ids), rule, re.compile(rule.route_pattern) if rule.route_pattern else None,
                             rule.count)
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

    def pick(self, method: str, path: str) -> Fault | None:
        """The fault for this request, if a rule hits it (the first matching rule that fires wins)."""
        with self._lock:
            for active in list(self._rules):
                rule = active.rule
                if rule.method and rule.method.upper() != method.upper():
                    continue
                if active.pattern is not None and not active.pattern.search(path):
                    continue
                if self._random.random() >= rule.error_rate:
                    continue
                active.hits += 1
                if active.remaining is not None:
                    active.remaining -= 1
                    if active.remaining <= 0:
                        self._rules.remove(active)
                return Fault(active.id, rule.status, rule.latency_ms, rule.after_commit, rule.retry_after)
            return None

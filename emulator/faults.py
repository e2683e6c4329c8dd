"""Fault injection: rules that make matching requests slow, fail, or fail after they took effect.

A rule hits a matching request with probability ``error_rate`` (from a seeded RNG, so runs repeat), at
most ``count`` times. ``after_commit`` runs the request and then replaces its response with the error:
the write happened but the caller cannot know, as when a response is lost on the wire.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, field_validator

from emulator.fault_rules import FiringRules


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
                raise ValueError(
                    f"route_pattern is not a valid regular expression: {exc}"
                ) from None
        return value


@dataclass(frozen=True)
class Fault:
    rule_id: int
    status: int | None
    latency_ms: int
    after_commit: bool
    retry_after: int | None


class FaultInjector(FiringRules[FaultRule]):
    def __init__(self, random_seed: int | None = None) -> None:
        super().__init__(random_seed)

    def pick(self, method: str, path: str) -> Fault | None:
        """The fault for this request, if a rule hits it (the first matching rule that fires wins)."""

        def matches(rule: FaultRule) -> bool:
            # re caches compiled patterns; the rule's validator already proved this one compiles.
            return (not rule.method or rule.method.upper() == method.upper()) and (
                rule.route_pattern is None or re.search(rule.route_pattern, path) is not None
            )

        active = self.fire(matches, lambda rule: rule.error_rate)
        if active is None:
            return None
        rule = active.rule
        return Fault(active.id, rule.status, rule.latency_ms, rule.after_commit, rule.retry_after)

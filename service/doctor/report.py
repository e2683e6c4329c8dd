"""What one preflight check found, and the report that prints each finding as soon as it is known."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from enum import Enum
from typing import TextIO


class Status(str, Enum):
    OK = "ok"
    FAIL = "FAIL"
    SKIP = (
        "skip"  # not run because an earlier hop failed, or not configured (never hides a failure)
    )


@dataclass(frozen=True)
class Finding:
    check: str  # e.g. "identity hop 1 (blueprint)"
    status: Status
    detail: str  # ok: what was proven; FAIL: what is wrong and what to do; skip: why not run

    def line(self) -> str:
        return f"{self.status.value:<4} {self.check}: {' '.join(self.detail.split())}"


def ok(check: str, detail: str) -> Finding:
    return Finding(check, Status.OK, detail)


def fail(check: str, detail: str) -> Finding:
    return Finding(check, Status.FAIL, detail)


def skip(check: str, detail: str) -> Finding:
    return Finding(check, Status.SKIP, detail)


class Report:
    """Prints one line per finding as it arrives (the progress an operator watches), keeps them all."""

    def __init__(self, out: TextIO | None = None) -> None:
        self._out = out if out is not None else sys.stdout
        self.findings: list[Finding] = []

    def add(self, finding: Finding) -> None:
        self.findings.append(finding)
        print(finding.line(), file=self._out, flush=True)

    def section(self, title: str) -> None:
        print(f"-- {title}", file=self._out, flush=True)

    @property
    def failures(self) -> list[Finding]:
        return [f for f in self.findings if f.status is Status.FAIL]

    def summary(self) -> str:
        failed = len(self.failures)
        passed = sum(f.status is Status.OK for f in self.findings)
        if failed:
            return f"doctor: {failed} check(s) failed, {passed} ok; fix the FAIL lines above and run it again"
        return f"doctor: all {passed} check(s) ok"

"""Wall and monotonic time moving together, as on one machine: what a lease reads, under the test's hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


class Clocks:
    def __init__(self) -> None:
        self.offset = 0.0

    def wall(self) -> datetime:
        return T0 + timedelta(seconds=self.offset)

    def mono(self) -> float:
        return 1000.0 + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds

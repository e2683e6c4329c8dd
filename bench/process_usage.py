"""CPU seconds and resident memory of one replica process, read from Linux's /proc.

Read by hand rather than through psutil, which is not a dependency of the project: two files and
three fields (utime and stime from ``/proc/<pid>/stat``, ``VmRSS`` from ``/proc/<pid>/status``) are
all a footprint needs, and the benchmarks run on Linux only (like the container image).
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcessUsage:
    cpu_s: float  # user + system CPU seconds since the process started
    rss_bytes: int
    at: float  # time.monotonic() of the reading


def read_usage(pid: int, proc: Path = Path("/proc")) -> ProcessUsage:
    """One reading; raises ProcessLookupError once the process is gone."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
        status = (proc / str(pid) / "status").read_text()
    except FileNotFoundError:
        raise ProcessLookupError(f"process {pid} is gone; no CPU or memory reading") from None
    # The command name (field 2) is in parentheses and may hold spaces: split after its closing one.
    fields = stat[stat.rindex(")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5), counted from 1
    rss_kb = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
    return ProcessUsage((utime + stime) / _CLOCK_TICKS, rss_kb * 1024, time.monotonic())


@dataclass
class UsageWindow:
    """CPU and RSS of one process over a measured window: a reading at each end and RSS samples between."""

    pid: int
    interval_s: float = 1.0
    first: ProcessUsage | None = None
    last: ProcessUsage | None = None
    rss_samples: list[int] = field(default_factory=list)

    async def sample_until(self, stop: asyncio.Event, max_seconds: float) -> None:
        """Sample every ``interval_s`` until ``stop`` is set (or ``max_seconds`` pass)."""
        self.first = read_usage(self.pid)
        self.rss_samples.append(self.first.rss_bytes)
        deadline = time.monotonic() + max_seconds
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                await asyncio.wait_for(stop.wait(), self.interval_s)
            except TimeoutError:
                pass
            reading = read_usage(self.pid)
            self.rss_samples.append(reading.rss_bytes)
            self.last = reading

    def cpu_seconds_per_minute(self) -> float | None:
        if self.first is None or self.last is None or self.last.at <= self.first.at:
            return None
        return round(
            (self.last.cpu_s - self.first.cpu_s) * 60.0 / (self.last.at - self.first.at), 3
        )

    def rss_mib(self) -> dict[str, float | None]:
        if not self.rss_samples:
            return {"max": None, "last": None, "samples": 0}
        mib = 1024 * 1024
        return {
            "max": round(max(self.rss_samples) / mib, 1),
            "last": round(self.rss_samples[-1] / mib, 1),
            "samples": len(self.rss_samples),
        }

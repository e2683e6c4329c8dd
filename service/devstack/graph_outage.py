"""A scripted Graph outage for a fleet run: every Graph read answered 503 with Retry-After for a while.

Injected through the emulator's admin API (``POST /_emulator/faults``, cleared with ``DELETE``), and
measured from the emulator's own request log, so the fleet's request rate before, during and after
the outage is what Graph saw, not what the replicas say about themselves.

Only GETs fail: in a fleet run every Graph request of the replicas is a read, while the seeded people
post their messages through Graph too, and those must get through so that there is something to
deliver once Graph is back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from emulator.stats import RequestRecord

GRAPH_PATHS = r"^/v1\.0/"


@dataclass(frozen=True)
class GraphOutage:
    at_s: float  # after traffic starts
    duration_s: float = 30.0
    status: int = 503
    retry_after_s: int = 5
    # At most this many reads are refused (None: every read for duration_s). One is what a single
    # replica's 429 looks like; the other replicas can then only learn the hold from the fleet's record.
    reads: int | None = None

    def fault_rule(self) -> dict[str, object]:
        rule: dict[str, object] = {
            "status": self.status,
            "retry_after": self.retry_after_s,
            "method": "GET",
            "route_pattern": GRAPH_PATHS,
            "error_rate": 1.0,
        }
        if self.reads is not None:
            rule["count"] = self.reads
        return rule


@dataclass(frozen=True)
class OutageWindow:
    """When the outage began and ended, on this process's monotonic clock (the emulator's too)."""

    outage: GraphOutage
    began: float
    ended: float


async def run_outage(
    outage: GraphOutage, admin_url: str, http: httpx.AsyncClient, traffic_began: float
) -> OutageWindow:
    wait = traffic_began + outage.at_s - time.monotonic()
    if wait > 0:
        await asyncio.sleep(wait)
    (await http.post(f"{admin_url}/faults", json=outage.fault_rule())).raise_for_status()
    began = time.monotonic()
    try:
        await asyncio.sleep(outage.duration_s)
    finally:
        (await http.delete(f"{admin_url}/faults")).raise_for_status()
    return OutageWindow(outage, began, time.monotonic())


def fleet_reads(records: Sequence[RequestRecord]) -> list[float]:
    """When each Graph read arrived (monotonic): the replicas' requests, not the people's posts."""
    return sorted(r.monotonic for r in records if r.method == "GET" and r.path.startswith("/v1.0/"))


def limit_throttles(records: Sequence[RequestRecord]) -> list[float]:
    """When each 429 that the emulator's Graph limits (not an injected fault) answered a replica's read
    was sent (monotonic): a fleet that rushes back after a hold shows up here as a burst."""
    return sorted(
        r.monotonic
        for r in records
        if r.method == "GET" and r.path.startswith("/v1.0/") and r.status == 429 and not r.fault
    )


def rate(times: Sequence[float], start: float, end: float) -> float:
    """Requests per second in [start, end)."""
    if end <= start:
        raise ValueError("a rate needs a window that ends after it starts")
    return sum(1 for t in times if start <= t < end) / (end - start)

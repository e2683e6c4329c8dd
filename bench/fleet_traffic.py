"""The fleet-traffic scenario: N replicas at the default cadence, one connected host each, humans posting
at a steady rate. Delivery latency and claim efficiency both read it (one run per replica count).

Sequence: start the fleet (its own emulator with the real throttling budget, the session's Azurite),
connect the hosts, wait until every replica polls in steady state, scrape each replica's /metrics,
post for the window, wait for every message to reach a host (bounded), scrape again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx

from bench.fleet_harness import (
    DeliveryOutcome,
    SteadyPoster,
    connected_hosts,
    delivery_outcome,
    graph_window,
    human_traffic,
    running_fleet,
    wait_for_deliveries,
    wait_until_polling,
)
from bench.profiles import TrafficProfile
from bench.replica_metrics import MetricsScrape, scrape
from bench.session import BenchSession
from emulator.seed import build_seed

WARMUP_MAX_S = 90.0


@dataclass(frozen=True)
class TrafficRun:
    replicas: int
    chats: int
    rate_per_s: float
    posting_s: float  # how long humans posted
    span_s: float  # first post → every message delivered (or the drain timed out)
    warmup_s: float
    delivery: DeliveryOutcome
    replica_deltas: dict[str, MetricsScrape]  # per replica: counter increases over posting + drain
    graph: dict[str, Any]

    def fleet_total(self, name: str, **labels: str) -> float:
        return sum(d.value(name, **labels) for d in self.replica_deltas.values())


async def run_traffic(session: BenchSession, replicas: int, profile: TrafficProfile) -> TrafficRun:
    seed = build_seed(chats=profile.chats, humans=4)
    async with (
        running_fleet(session, seed, replicas, f"traffic-{replicas}") as fleet,
        httpx.AsyncClient(timeout=30) as http,
        connected_hosts(fleet.members) as hosts,
    ):
        assert fleet.emulator is not None
        warmup = await wait_until_polling(http, fleet.members, WARMUP_MAX_S)
        before = {m.name: await scrape(http, m.base_url) for m in fleet.members}
        fleet.emulator.stats.reset()
        poster = SteadyPoster(
            seed, human_traffic(fleet, http), profile.rate_per_s, profile.window_s
        )
        began = time.monotonic()
        posting = await poster.run()
        await wait_for_deliveries(hosts, poster.posted, profile.drain_max_s)
        span = time.monotonic() - began
        graph = graph_window(fleet.emulator.stats, seed, span).as_dict()
        after = {m.name: await scrape(http, m.base_url) for m in fleet.members}
        return TrafficRun(
            replicas=replicas,
            chats=profile.chats,
            rate_per_s=profile.rate_per_s,
            posting_s=round(posting, 2),
            span_s=round(span, 2),
            warmup_s=round(warmup, 2),
            delivery=delivery_outcome(hosts, poster.posted),
            replica_deltas={name: after[name].minus(before[name]) for name in after},
            graph=graph,
        )


async def traffic_run(session: BenchSession, replicas: int) -> TrafficRun:
    """The session's run for ``replicas`` (made once, shared by the benchmarks that read it)."""
    profile = session.profile.traffic
    return await session.scenario(
        ("fleet_traffic", replicas, profile), lambda: run_traffic(session, replicas, profile)
    )

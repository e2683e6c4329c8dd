"""The single-replica load scenario: one replica watching N chats, measured in phases. Graph cost and
footprint both read it (one run per chat count).

Sequence, on a fleet of one replica (its own emulator with the real throttling budget):

1. cold starts: the replica is stopped and started again ``cold_starts`` times; each start is timed
   from spawning the process to the first 200 on /readyz (start-up runs the first discovery sweep);
2. ``no_host``: no host connected, so the replica polls nothing for delivery (discovery only), measured
   once the discovery loop's own first sweep (right after start-up's) is done;
3. warm-up: a host connects; wait for two chat-poll cycles (every chat's cursor started at its first
   watch, with no host; a chat is read only if something moved); how long that takes is itself a result;
4. ``idle``: the host stays connected, nobody posts;
5. ``busy``: humans post at ``busy_rate_per_s``; afterwards, a bounded drain for the delivery figures.

In each phase: the fleet's Graph requests as the emulator saw them, the replica's own counters, and
its CPU seconds and RSS from /proc.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

import httpx

from bench.fleet_harness import (
    SteadyPoster,
    connected_hosts,
    delivery_outcome,
    graph_window,
    human_traffic,
    idle_for,
    running_fleet,
    wait_for_deliveries,
    wait_until_polling,
)
from bench.process_usage import UsageWindow, read_usage
from bench.profiles import LoadProfile
from bench.replica_metrics import scrape
from bench.session import BenchSession
from emulator.seed import build_seed
from service.devstack.fleet import LocalFleet, ReplicaProcess

READY_POLL_S = 0.05  # finer than ReplicaProcess.wait_ready: this is the figure being measured
READY_MAX_S = 180.0


@dataclass(frozen=True)
class ColdStart:
    seconds: float  # process spawn → first 200 on /readyz
    rss_mib_at_ready: float
    graph: dict[str, Any]


@dataclass(frozen=True)
class PhaseMeasure:
    name: str
    seconds: float
    graph: dict[str, Any]
    cpu_s_per_min: float | None
    rss_mib: dict[str, Any]
    chat_poll_cycles: int
    replica_graph_requests: int
    replica_throttles: int
    delivery: dict[str, Any] | None = None


@dataclass(frozen=True)
class LoadRun:
    chats: int
    watched_chats: int
    cold_starts: list[ColdStart]
    warmup_s: float
    warmup_graph: dict[str, Any]
    phases: dict[str, PhaseMeasure]


async def _cold_start(
    fleet: LocalFleet, member: ReplicaProcess, http: httpx.AsyncClient
) -> ColdStart:
    assert fleet.emulator is not None
    await asyncio.to_thread(member.terminate)
    fleet.emulator.stats.reset()
    began = time.monotonic()
    member.start()
    deadline = began + READY_MAX_S
    while time.monotonic() < deadline:
        if not member.alive:
            raise RuntimeError(
                f"{member.name} exited during start-up; its log:\n{member.log_tail()}"
            )
        with contextlib.suppress(httpx.HTTPError):
            if (await http.get(f"{member.base_url}/readyz", timeout=2)).status_code == 200:
                took = time.monotonic() - began
                assert member.proc is not None
                rss = read_usage(member.proc.pid).rss_bytes / (1024 * 1024)
                return ColdStart(
                    round(took, 3),
                    round(rss, 1),
                    graph_window(fleet.emulator.stats, fleet.seed, took).as_dict(),
                )
        await asyncio.sleep(READY_POLL_S)
    raise TimeoutError(
        f"{member.name} was not ready {READY_MAX_S:.0f} s after spawn; its log:\n{member.log_tail()}"
    )


async def _phase(
    name: str,
    fleet: LocalFleet,
    member: ReplicaProcess,
    http: httpx.AsyncClient,
    work: Callable[[], Awaitable[float]],
) -> PhaseMeasure:
    """Measure one phase while ``work()`` runs; ``work`` returns the seconds it lasted."""
    assert fleet.emulator is not None and member.proc is not None
    before = await scrape(http, member.base_url)
    fleet.emulator.stats.reset()
    usage = UsageWindow(member.proc.pid)
    stop = asyncio.Event()
    sampler = asyncio.create_task(usage.sample_until(stop, max_seconds=24 * 3600))
    await asyncio.sleep(0)  # the sampler takes its first reading now, not after the work
    try:
        seconds = await work()
    finally:
        stop.set()
        await sampler
    graph = graph_window(fleet.emulator.stats, fleet.seed, seconds).as_dict()
    delta = (await scrape(http, member.base_url)).minus(before)
    return PhaseMeasure(
        name=name,
        seconds=round(seconds, 1),
        graph=graph,
        cpu_s_per_min=usage.cpu_seconds_per_minute(),
        rss_mib=usage.rss_mib(),
        chat_poll_cycles=int(
            delta.value("entrabot_loop_cycles_total", loop="chat_poll", outcome="ok")
        ),
        replica_graph_requests=int(delta.value("entrabot_graph_requests_total")),
        replica_throttles=int(delta.value("entrabot_graph_throttles_total")),
    )


async def _watched(http: httpx.AsyncClient, member: ReplicaProcess) -> int:
    body = (await http.get(f"{member.base_url}/readyz", timeout=5)).json()
    return int(body.get("watched_chats", 0))


async def run_load(session: BenchSession, chats: int, profile: LoadProfile) -> LoadRun:
    seed = build_seed(chats=chats, humans=4)
    window = profile.steady_window_s(chats)
    async with (
        running_fleet(session, seed, 1, f"load-{chats}") as fleet,
        httpx.AsyncClient(timeout=30) as http,
    ):
        assert fleet.emulator is not None
        member = fleet.members[0]
        colds = [await _cold_start(fleet, member, http) for _ in range(profile.cold_starts)]
        watched = await _watched(http, member)
        phases = {
            "no_host": await _phase("no_host", fleet, member, http, idle_for(profile.no_host_s))
        }
        fleet.emulator.stats.reset()
        async with connected_hosts([member]) as hosts:
            warmup = await wait_until_polling(http, [member], profile.warmup_max_s(chats))
            warmup_graph = graph_window(fleet.emulator.stats, seed, warmup).as_dict()
            phases["idle"] = await _phase("idle", fleet, member, http, idle_for(window))
            poster = SteadyPoster(seed, human_traffic(fleet, http), profile.busy_rate_per_s, window)
            busy = await _phase("busy", fleet, member, http, poster.run)
            await wait_for_deliveries(hosts, poster.posted, window)
            phases["busy"] = replace(
                busy, delivery=delivery_outcome(hosts, poster.posted).as_dict()
            )
        return LoadRun(
            chats=chats,
            watched_chats=watched,
            cold_starts=colds,
            warmup_s=round(warmup, 1),
            warmup_graph=warmup_graph,
            phases=phases,
        )


async def load_run(session: BenchSession, chats: int) -> LoadRun:
    """The session's run for ``chats`` (made once, shared by the benchmarks that read it)."""
    profile = session.profile.load
    return await session.scenario(
        ("replica_load", chats, profile), lambda: run_load(session, chats, profile)
    )

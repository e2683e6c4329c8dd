"""The pieces every fleet benchmark is built from: a fleet on the session's Azurite, connected hosts,
waiting until replicas poll in steady state, seeded humans posting at a steady rate, and what the
emulator saw the fleet send."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx

from bench.replica_metrics import scrape
from bench.session import BenchSession
from bench.stats import summarize
from emulator.seed import Seed
from emulator.stats import RECENT_LIMIT, RequestRecord, RequestStats
from service.devstack.channel_host import ChannelHost, ReceivedPush
from service.devstack.fleet import DEV_TOKEN, LocalFleet, ReplicaProcess
from service.devstack.traffic import HumanTraffic, Posted

POLL_S = 0.25  # how often a wait re-checks a replica's /metrics or /readyz
HOST_STOP_S = 10.0
CHAT_MESSAGES_ROUTE = "/v1.0/chats/{id}/messages"


@contextlib.asynccontextmanager
async def running_fleet(
    session: BenchSession,
    seed: Seed,
    replicas: int,
    name: str,
    extra_env: dict[str, str] | None = None,
) -> AsyncIterator[LocalFleet]:
    """A fleet with its own emulator and container on the session's Azurite, stopped on exit."""
    fleet = LocalFleet(
        seed,
        session.scratch(name),
        replicas=replicas,
        extra_env=extra_env or {},
        azurite=await session.azurite(),
    )
    try:
        await asyncio.to_thread(fleet.start)
        yield fleet
    finally:
        await asyncio.to_thread(fleet.stop)


@contextlib.asynccontextmanager
async def connected_hosts(members: Sequence[ReplicaProcess]) -> AsyncIterator[list[ChannelHost]]:
    """One host per replica (host i on replica i), each holding an MCP session with a push stream."""
    hosts = [
        ChannelHost(f"host-{i + 1}", [m.mcp_url], token=DEV_TOKEN) for i, m in enumerate(members)
    ]
    stop = asyncio.Event()
    tasks = [asyncio.create_task(h.run(stop), name=h.name) for h in hosts]
    try:
        yield hosts
    finally:
        stop.set()
        _, pending = await asyncio.wait(tasks, timeout=HOST_STOP_S)
        for task in pending:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def wait_until_polling(
    http: httpx.AsyncClient, members: Sequence[ReplicaProcess], timeout_s: float
) -> float:
    """Wait until every replica holds a push stream, has finished two chat-poll cycles since, and knows
    every watched chat's cursor (the fleet made each chat's first sight); returns how long that took."""
    began = time.monotonic()
    deadline = began + timeout_s
    baseline: dict[str, float] = {}
    while time.monotonic() < deadline:
        done = 0
        for member in members:
            metrics = await scrape(http, member.base_url)
            cycles = metrics.value("entrabot_loop_cycles_total", loop="chat_poll", outcome="ok")
            if metrics.value("entrabot_push_streams") < 1:
                continue
            baseline.setdefault(member.name, cycles)
            if (
                cycles >= baseline[member.name] + 2
                and metrics.value("entrabot_chat_first_sights_pending") == 0
            ):
                done += 1
        if done == len(members):
            return time.monotonic() - began
        await asyncio.sleep(POLL_S)
    raise TimeoutError(
        f"replicas did not reach steady polling within {timeout_s:.0f} s (a host may have failed "
        "to connect, or Graph throttling slowed the first sweeps); see the replica logs"
    )


def human_members(seed: Seed) -> list[tuple[str, list[str]]]:
    """Each chat of the seed with the humans who may post in it."""
    agent_id = seed.agent_user.id
    out = []
    for chat in seed.chats:
        assert chat.id is not None  # build_seed names every chat
        humans = [
            u.id
            for ref in chat.members
            if (u := seed.find_user(ref)) is not None and u.id != agent_id
        ]
        out.append((chat.id, humans))
    return out


@dataclass
class SteadyPoster:
    """Humans posting chat messages at random (Poisson) times, ``rate_per_s`` on average, for ``window_s``."""

    seed: Seed
    traffic: HumanTraffic
    rate_per_s: float
    window_s: float
    rng: random.Random = field(default_factory=lambda: random.Random(20261129))
    posted: list[Posted] = field(default_factory=list)

    async def run(self) -> float:
        """Post until the window ends; returns its length in seconds (longer if a post was slow)."""
        chats = human_members(self.seed)
        began = time.monotonic()
        due = began
        for n in range(
            int(self.rate_per_s * self.window_s * 3) + 1
        ):  # bounded well past the expected count
            due += self.rng.expovariate(self.rate_per_s)
            if due - began > self.window_s:
                break
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            chat_id, humans = self.rng.choice(chats)
            user = self.seed.find_user(self.rng.choice(humans))
            assert user is not None
            self.posted.append(
                await self.traffic.post_chat(user, chat_id, f"benchmark message {n}")
            )
        await asyncio.sleep(
            max(0.0, began + self.window_s - time.monotonic())
        )  # the window is the same length
        return time.monotonic() - began


def idle_for(seconds: float) -> Callable[[], Awaitable[float]]:
    """A window's work when nobody posts: wait ``seconds``; returns how long it lasted."""

    async def idle() -> float:
        began = time.monotonic()
        await asyncio.sleep(seconds)
        return time.monotonic() - began

    return idle


def human_traffic(fleet: LocalFleet, http: httpx.AsyncClient) -> HumanTraffic:
    assert fleet.emulator is not None
    return HumanTraffic(fleet.seed, fleet.emulator.base_url, http)


async def wait_for_deliveries(
    hosts: Sequence[ChannelHost], posted: Sequence[Posted], timeout_s: float
) -> float:
    """Wait until every posted message reached some host (or the timeout); returns the seconds waited."""
    wanted = {p.message_id for p in posted}
    began = time.monotonic()
    while time.monotonic() - began < timeout_s:
        if wanted <= {push.message_id for h in hosts for push in h.pushes}:
            break
        await asyncio.sleep(POLL_S)
    return time.monotonic() - began


@dataclass(frozen=True)
class DeliveryOutcome:
    posted: int
    delivered: int  # distinct posted messages pushed to some host
    duplicates: int  # pushes beyond the first of a message: must be 0
    missing: int
    latencies_s: list[
        float
    ]  # message creation (Graph's createdDateTime) → push received by the host
    pushes_by_host: dict[str, int]

    def as_dict(self) -> dict[str, Any]:
        return {
            "posted": self.posted,
            "delivered": self.delivered,
            "duplicates": self.duplicates,
            "missing": self.missing,
            "pushes_by_host": self.pushes_by_host,
            "latency_s": summarize(self.latencies_s).as_dict(),
        }


def delivery_outcome(hosts: Sequence[ChannelHost], posted: Sequence[Posted]) -> DeliveryOutcome:
    wanted = {p.message_id: p for p in posted}
    pushes: list[ReceivedPush] = [
        push for h in hosts for push in h.pushes if push.message_id in wanted
    ]
    counts = Counter(push.message_id for push in pushes)
    first: dict[str, ReceivedPush] = {}
    for push in sorted(pushes, key=lambda p: p.received_at):
        first.setdefault(push.message_id, push)
    latencies = [
        push.received_at - datetime.fromisoformat(wanted[mid].created).timestamp()
        for mid, push in first.items()
    ]
    return DeliveryOutcome(
        posted=len(wanted),
        delivered=len(first),
        duplicates=sum(n - 1 for n in counts.values()),
        missing=len(wanted) - len(first),
        latencies_s=latencies,
        pushes_by_host=dict(Counter(push.host for push in pushes)),
    )


# --- what the emulator saw ---


def is_chat_messages_route(route: str) -> bool:
    """Graph budgets chat-message reads and posts separately from every other request."""
    return "/chats/{id}/messages" in route


@dataclass(frozen=True)
class GraphWindow:
    """The fleet's Graph requests in one window, from the emulator's records (the humans' posts, made
    with another app's token and budget, are left out)."""

    seconds: float
    by_route: dict[str, dict[str, int]]  # "GET /v1.0/chats/{id}/messages" -> {"200": n, "429": m}
    chat_message_requests: (
        int  # every attempt, 429s included: Graph counts them against the budget too
    )
    chat_message_ok: int
    other_requests: int
    throttled: int  # 429s answered to the fleet
    sweep_interval_s: dict[str, Any]  # between two successful polls of the same chat
    records_truncated: bool

    def as_dict(self) -> dict[str, Any]:
        per_min = 60.0 / self.seconds if self.seconds > 0 else 0.0
        return {
            "seconds": round(self.seconds, 1),
            "requests": self.chat_message_requests + self.other_requests,
            "requests_per_min": round(
                (self.chat_message_requests + self.other_requests) * per_min, 1
            ),
            "chat_message_requests_per_min": round(self.chat_message_requests * per_min, 1),
            "other_requests_per_min": round(self.other_requests * per_min, 1),
            "chat_message_requests_per_s": round(self.chat_message_requests / self.seconds, 2)
            if self.seconds
            else 0,
            "chat_message_ok_per_s": round(self.chat_message_ok / self.seconds, 2)
            if self.seconds
            else 0,
            "throttled_429": self.throttled,
            "throttled_429_per_min": round(self.throttled * per_min, 1),
            "by_route": self.by_route,
            "sweep_interval_s": self.sweep_interval_s,
            "records_truncated": self.records_truncated,
        }


def graph_window(stats: RequestStats, seed: Seed, seconds: float) -> GraphWindow:
    records = stats.recent()
    truncated = len(records) >= RECENT_LIMIT
    humans_app = seed.public_client.app_id
    fleet = [r for r in records if r.app_id != humans_app]
    by_route: dict[str, Counter[str]] = defaultdict(Counter)
    chat_messages = chat_ok = other = throttled = 0
    for r in fleet:
        if not r.path.startswith("/v1.0"):
            continue  # the token endpoint: Entra, not Graph's budget
        by_route[f"{r.method} {r.route}"][str(r.status)] += 1
        if is_chat_messages_route(r.route):
            chat_messages += 1
            chat_ok += 200 <= r.status < 300
        else:
            other += 1
        throttled += r.status == 429
    return GraphWindow(
        seconds=seconds,
        by_route={k: dict(v) for k, v in sorted(by_route.items())},
        chat_message_requests=chat_messages,
        chat_message_ok=chat_ok,
        other_requests=other,
        throttled=throttled,
        sweep_interval_s=summarize(_same_chat_intervals(fleet)).as_dict(),
        records_truncated=truncated,
    )


def _same_chat_intervals(records: Sequence[RequestRecord]) -> list[float]:
    times: dict[str, list[float]] = defaultdict(list)
    for r in records:
        if r.method == "GET" and r.route == CHAT_MESSAGES_ROUTE and r.status == 200:
            times[r.path].append(r.monotonic)
    return [b - a for ts in times.values() for a, b in zip(sorted(ts), sorted(ts)[1:])]

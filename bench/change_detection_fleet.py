"""The change-detection scenario: one fleet per (mode, chat count), measured at each replica count.

A fleet starts with the largest replica count of the profile on a pre-seeded container (watched list
and cursors, see ``ledger_preseed``) and is shrunk step by step (6 → 3 → 1 replicas): each step stops
the surplus replicas (SIGTERM), keeping the subscription manager's replica (the subscription's
notification URL is its own loopback address, as the ingress address would be in a cluster), connects
one host per remaining replica, then measures an idle and a busy window (see ``change_detection``).
Shrinking one warm fleet instead of starting three keeps the full matrix within ~20 minutes; each step
first waits until the fleet is in steady state again (two chat-poll cycles per replica, the scanner
lease held by a live replica).

Modes: ``ordered`` (the default tenant), ``unordered`` (the tenant refuses
``$orderby=lastMessagePreview/createdDateTime desc``), ``notifications`` (change notifications to the
replicas with ``NOTIFICATION_LATENCY_MS`` of emulated latency).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx

from bench.fleet_harness import (
    SteadyPoster,
    delivery_outcome,
    graph_window,
    human_traffic,
    wait_for_deliveries,
    wait_until_polling,
)
from bench.ledger_preseed import Preseeded, preseed_ledger
from bench.process_usage import UsageWindow
from bench.replica_metrics import MetricsScrape, scrape
from bench.session import BenchSession
from emulator.seed import Seed, build_seed
from emulator.subscription_policy import SubscriptionPolicy
from service.telemetry.metrics import StorageMetrics
from service.devstack.channel_host import ChannelHost
from service.devstack.fleet import LocalFleet, ReplicaProcess
from service.ledger.fleet.hints import Hint, HintReader
from service.ledger.fleet.leases import LeaseRecord, lease_key, parse_lease
from service.ledger.records.reads import ReadOutcome, read_parsed
from service.storage.backend import MemoryBackend
from service.storage.blob import BlobBackend

MODES = ("ordered", "notifications", "unordered")
NOTIFICATION_LATENCY_MS = 1000
SCANNER_ROLE = "chat_scanner"
MANAGER_ROLE = "subscription_manager"
POLL_S = 0.1  # how often a takeover or subscription wait re-reads the store or the emulator
SUBSCRIPTION_WAIT_S = 30.0


def mode_seed(mode: str, chats: int) -> Seed:
    seed = build_seed(chats=chats, humans=4)
    if mode == "unordered":
        return seed.model_copy(update={"chats_orderby": "refused"})
    if mode == "notifications":
        return seed.model_copy(
            update={"subscriptions": SubscriptionPolicy(latency_ms=NOTIFICATION_LATENCY_MS)}
        )
    if mode != "ordered":
        raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
    return seed


def mode_env(mode: str) -> dict[str, str]:
    if mode != "notifications":
        return {}
    # Each replica's own loopback receiver: only the manager's URL is subscribed, so the manager's
    # replica is kept alive while the fleet shrinks (see choose_survivors).
    return {
        "ENTRABOT_NOTIFICATION_URL": "http://127.0.0.1:{port}/graph/notifications",
        "ENTRABOT_NOTIFICATION_CLIENT_STATE": "bench-" + uuid.uuid4().hex,
    }


def replica_id(member: ReplicaProcess) -> str:
    return member.env["ENTRABOT_REPLICA_ID"]


def choose_survivors(alive: Sequence[str], keep_first: Sequence[str], count: int) -> list[str]:
    """``count`` of the ``alive`` replica ids: those in ``keep_first`` (that are alive) first, then the
    others in order."""
    preferred = [r for r in keep_first if r in alive]
    ordered = list(dict.fromkeys([*preferred, *alive]))
    return ordered[:count]


@dataclass
class ModeFleet:
    mode: str
    chats: int
    fleet: LocalFleet
    backend: MemoryBackend  # the bench's own view of the fleet's container (leases, hints)
    preseeded: Preseeded
    start_s: float

    @property
    def seed(self) -> Seed:
        return self.fleet.seed

    @property
    def alive(self) -> list[ReplicaProcess]:
        return [m for m in self.fleet.members if m.alive]

    async def lease(self, role: str) -> LeaseRecord | None:
        read = await read_parsed(self.backend, lease_key(role), parse_lease)
        return read.value if read.outcome is ReadOutcome.PRESENT else None

    async def shrink_to(self, count: int) -> list[ReplicaProcess]:
        """Stop (SIGTERM) every live replica beyond ``count``, keeping the subscription manager's."""
        manager = await self.lease(MANAGER_ROLE)
        alive = self.alive
        keep = set(
            choose_survivors(
                [replica_id(m) for m in alive], [manager.holder] if manager else [], count
            )
        )
        await asyncio.gather(
            *(asyncio.to_thread(m.terminate) for m in alive if replica_id(m) not in keep)
        )
        return [m for m in alive if replica_id(m) in keep]

    async def wait_for_live_holder(
        self, role: str, timeout_s: float, *, await_lease: bool = False
    ) -> str | None:
        """The role's holder once it is a live replica; after ``timeout_s``, the holder as it stands.
        Without a lease: None at once (a build without the role), or with ``await_lease`` once
        ``timeout_s`` has passed without one appearing."""
        deadline = time.monotonic() + timeout_s
        while True:
            record = await self.lease(role)
            if record is None:
                if not await_lease or time.monotonic() >= deadline:
                    return None
                await asyncio.sleep(POLL_S)
                continue
            if record.holder in {replica_id(m) for m in self.alive} or time.monotonic() >= deadline:
                return record.holder
            await asyncio.sleep(POLL_S)

    async def wait_for_chat_subscription(self, http: httpx.AsyncClient, timeout_s: float) -> bool:
        assert self.fleet.emulator is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            body = (await http.get(f"{self.fleet.emulator.admin_url}/subscriptions")).json()
            if any(s["kind"] != "inbox" for s in body["subscriptions"]):
                return True
            await asyncio.sleep(POLL_S * 5)
        return False

    async def emulator_admin(
        self, http: httpx.AsyncClient, method: str, path: str, body: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        assert self.fleet.emulator is not None
        response = await http.request(method, f"{self.fleet.emulator.admin_url}{path}", json=body)
        response.raise_for_status()
        answer: dict[str, Any] = response.json()
        return answer


@contextlib.asynccontextmanager
async def mode_fleet(
    session: BenchSession, mode: str, chats: int, replicas: int
) -> AsyncIterator[ModeFleet]:
    """A pre-seeded fleet of ``replicas`` on a fresh Azurite (one fleet runs well under Azurite's
    10-minute garbage sweep) with its own emulator, stopped on exit."""
    azurite = await session.fresh_azurite()
    seed = mode_seed(mode, chats)
    fleet = LocalFleet(
        seed,
        session.scratch(f"change-{mode}-{chats}"),
        replicas=replicas,
        extra_env=mode_env(mode),
        azurite=azurite,
    )
    backend = BlobBackend.from_connection_string(
        azurite.connection_string, fleet.container, metrics=StorageMetrics()
    )
    try:
        await asyncio.to_thread(fleet.ensure_container)
        preseeded = await preseed_ledger(backend, [c.id for c in seed.chats if c.id is not None])
        began = time.monotonic()
        await asyncio.to_thread(fleet.start)
        yield ModeFleet(mode, chats, fleet, backend, preseeded, round(time.monotonic() - began, 2))
    finally:
        await asyncio.to_thread(fleet.stop)
        await backend.aclose()


# --- one measured window ---


@dataclass(frozen=True)
class Window:
    seconds: float
    graph: dict[str, Any]  # GraphWindow.as_dict()
    usage: dict[str, dict[str, Any]]  # replica id -> cpu_core_share, rss_mib
    replica_deltas: dict[str, MetricsScrape]


async def measure_window(
    mf: ModeFleet,
    members: Sequence[ReplicaProcess],
    http: httpx.AsyncClient,
    work: Callable[[], Awaitable[float]],
) -> Window:
    """The fleet's Graph requests (as the emulator saw them), each replica's CPU and RSS, and its
    counters, while ``work()`` runs; ``work`` returns the window's length in seconds."""
    assert mf.fleet.emulator is not None
    before = {replica_id(m): await scrape(http, m.base_url) for m in members}
    windows = {replica_id(m): UsageWindow(m.proc.pid) for m in members if m.proc is not None}
    stop = asyncio.Event()
    samplers = [
        asyncio.create_task(w.sample_until(stop, max_seconds=3600)) for w in windows.values()
    ]
    mf.fleet.emulator.stats.reset()
    await asyncio.sleep(0)  # the samplers take their first reading now
    try:
        seconds = await work()
    finally:
        stop.set()
        await asyncio.gather(*samplers, return_exceptions=True)
    graph = graph_window(mf.fleet.emulator.stats, mf.seed, seconds).as_dict()
    after = {replica_id(m): await scrape(http, m.base_url) for m in members}
    usage = {}
    for rid, w in windows.items():
        per_min = w.cpu_seconds_per_minute()
        usage[rid] = {
            "cpu_core_share": None if per_min is None else round(per_min / 60, 4),
            "rss_mib": w.rss_mib(),
        }
    return Window(
        round(seconds, 2), graph, usage, {rid: after[rid].minus(before[rid]) for rid in after}
    )


@dataclass
class BusyWork:
    """Humans post for ``window_s``, then a bounded wait until every message reached a host."""

    mf: ModeFleet
    hosts: Sequence[ChannelHost]
    http: httpx.AsyncClient
    rate_per_s: float
    window_s: float
    drain_max_s: float
    poster: SteadyPoster | None = field(default=None, init=False)

    async def __call__(self) -> float:
        began = time.monotonic()
        self.poster = SteadyPoster(
            self.mf.seed, human_traffic(self.mf.fleet, self.http), self.rate_per_s, self.window_s
        )
        await self.poster.run()
        await wait_for_deliveries(self.hosts, self.poster.posted, self.drain_max_s)
        return time.monotonic() - began

    def outcome(self) -> dict[str, Any]:
        assert self.poster is not None
        return delivery_outcome(self.hosts, self.poster.posted).as_dict()

    def latencies(self) -> list[float]:
        assert self.poster is not None
        return delivery_outcome(self.hosts, self.poster.posted).latencies_s


async def settle(
    mf: ModeFleet, members: Sequence[ReplicaProcess], http: httpx.AsyncClient, timeout_s: float
) -> dict[str, Any]:
    """Wait (bounded) for steady polling, the scanner lease on a live replica and, in notifications mode,
    a chat subscription. A bound reached is recorded, not fatal: the windows are measured anyway."""
    began = time.monotonic()
    try:
        steady_s: float | None = round(await wait_until_polling(http, members, timeout_s), 2)
    except TimeoutError:
        steady_s = None
    left = max(1.0, timeout_s - (time.monotonic() - began))
    out: dict[str, Any] = {
        "steady_after_s": steady_s,
        "scanner": await mf.wait_for_live_holder(SCANNER_ROLE, left),
    }
    if mf.mode == "notifications":
        out["chat_subscription"] = await mf.wait_for_chat_subscription(
            http, max(left, SUBSCRIPTION_WAIT_S)
        )
        out["subscription_manager"] = await mf.wait_for_live_holder(MANAGER_ROLE, 1.0)
    out["settle_s"] = round(time.monotonic() - began, 2)
    return out


# --- scanner takeover ---


async def scanner_takeover(
    mf: ModeFleet,
    http: httpx.AsyncClient,
    hosts: Sequence[ChannelHost],
    lease_wait_s: float,
    max_s: float,
) -> dict[str, Any]:
    """SIGKILL the replica named in leases/chat_scanner.json, post one message at once, and time: the
    lease naming another live replica, the first scan hint for that message's chat, the message reaching
    a host. Not measured when no replica takes the scanner lease within ``lease_wait_s``."""
    holder = await mf.wait_for_live_holder(SCANNER_ROLE, lease_wait_s, await_lease=True)
    if holder is None:
        return {
            "measured": False,
            "reason": f"not measured: no scanner lease ({lease_key(SCANNER_ROLE)} absent "
            f"after {lease_wait_s:.0f} s)",
        }
    victim = next((m for m in mf.alive if replica_id(m) == holder), None)
    if victim is None:
        return {
            "measured": False,
            "reason": f"not measured: the lease holder {holder} is not a live replica",
        }
    reader = HintReader(mf.backend)
    await reader.poll()  # hints written before the kill are not the ones we wait for
    chat = mf.seed.chats[len(mf.seed.chats) // 2]
    author = mf.seed.humans[0]
    assert chat.id is not None
    await asyncio.to_thread(victim.kill)
    killed = time.monotonic()
    posted = await human_traffic(mf.fleet, http).post_chat(author, chat.id, "takeover probe")
    created = datetime.fromisoformat(posted.created)
    new_holder: str | None = None
    taken_s = hint_s = delivered_s = None
    while time.monotonic() - killed < max_s and (
        taken_s is None or hint_s is None or delivered_s is None
    ):
        now = time.monotonic() - killed
        if taken_s is None:
            record = await mf.lease(SCANNER_ROLE)
            if (
                record is not None
                and record.holder != holder
                and record.holder in {replica_id(m) for m in mf.alive}
            ):
                new_holder, taken_s = record.holder, round(now, 2)
        if hint_s is None and _scan_hint_for(await reader.poll() or [], chat.id, created):
            hint_s = round(now, 2)
        if delivered_s is None and any(
            p.message_id == posted.message_id for h in hosts for p in h.pushes
        ):
            delivered_s = round(now, 2)
        await asyncio.sleep(POLL_S)
    return {
        "measured": True,
        "killed": holder,
        "new_holder": new_holder,
        "lease_taken_over_s": taken_s,
        "first_scan_hint_s": hint_s,
        "probe_delivered_s": delivered_s,
        "bound_s": max_s,
        "replicas_before": len(mf.alive) + 1,
    }


def _scan_hint_for(hints: Sequence[Hint], chat_id: str, created: datetime) -> bool:
    return any(h.chat_id == chat_id and h.source == "scan" and h.newest >= created for h in hints)

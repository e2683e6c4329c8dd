"""Discovery is a fleet-singleton role: only the ``discovery`` lease holder walks ``GET /me/chats``, and
every other replica's SponsorGate learns the chat members from the shared snapshot it writes.

Two replicas' workers (the replica's own wiring) on one LocalBackend and the Graph emulator over
HTTP; Graph's request log counts who listed chats. Ada's B2B guest account (in our tenant, under her
address) is in a shared chat: a gate knows it is Ada's only from that chat's members.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from lease_clocks import Clocks
from worker_stack import WorkerStack, build_stack

from emulator.seed import Seed, SeedChat, SeedUser, ThrottleBudget, build_seed, load_seed, stable_id
from emulator.server import RunningEmulator, start_emulator
from service.domain.conversation import TEAMS_CHATS
from service.graph.client import GraphClient
from service.graph.models import Chat
from service.graph.pages import Page
from service.graph.resources.chats import GraphChats
from service.ledger.fleet.leases import Lease, lease_key
from service.ledger.memory.chat_members import CHAT_MEMBERS_KEY, parse_chat_members
from service.ledger.memory.watched_chats import WatchedChats
from service.storage.faults import Fault, FaultRule, FaultyBackend, Op
from service.storage.local import LocalBackend
from service.telemetry.metrics import RoleMetrics
from service.workers import discovery as discovery_module
from service.workers.discovery import ROLE

LIST_CHATS = "GET /v1.0/me/chats"
TTL = timedelta(seconds=30)
# Shorter than the time a holder may act after renewing (ttl minus the 10 s margin): advancing one
# interval never costs the holder its lease unless a test means it to.
INTERVAL_S = 10.0


def _seed(chats: int = 2) -> Seed:
    base = build_seed(chats=chats, throttle=ThrottleBudget.relaxed())
    ada = base.sponsors[0]
    guest = SeedUser(
        id=stable_id(base.tenant_id, "ada-guest"),
        user_principal_name=f"ada_fabrikam.example#EXT#@{base.tenant_domain}",
        display_name="Ada (Guest)",
        given_name="AdaGuest",
        mail=ada.address,
    )
    shared = SeedChat(
        id=f"19:shared-{base.tenant_id}@thread.v2",
        topic="Shared",
        created="-1d",
        members=(base.agent_user.id, ada.id, guest.id),
    )
    raw = base.model_dump()
    raw["users"] = [*raw["users"], guest.model_dump()]
    raw["chats"] = [*raw["chats"], shared.model_dump()]
    return load_seed(raw)


@dataclass
class Fleet:
    emulator: RunningEmulator
    backend: LocalBackend
    a: WorkerStack
    b: WorkerStack
    clocks: Clocks

    @property
    def guest_id(self) -> str:
        return stable_id(self.emulator.seed.tenant_id, "ada-guest")

    @property
    def shared_chat(self) -> str:
        return f"19:shared-{self.emulator.seed.tenant_id}@thread.v2"

    def chat_lists(self) -> int:
        return self.emulator.stats.count(LIST_CHATS)


def with_chats(graph: GraphClient, chats: GraphChats) -> GraphClient:
    """``graph`` with its chats resource replaced (a copy: the fleet's own client stays as it was)."""
    replaced = copy.copy(graph)
    replaced.chats = chats
    return replaced


class SlowPages(GraphChats):
    """The replica's Graph chats, each chats page taking ``seconds`` of the test's clock (a slow walk)."""

    def __init__(self, chats: GraphChats, clocks: Clocks, seconds: float) -> None:
        self.__dict__.update(chats.__dict__)  # the same transport: connections, tokens and metrics
        self._clocks, self._seconds = clocks, seconds

    async def my_chats_page(self, next_link: str | None = None) -> Page[Chat]:
        page = await super().my_chats_page(next_link)
        self._clocks.advance(self._seconds)
        return page


def _on_clocks(stack: WorkerStack, backend: LocalBackend, clocks: Clocks, replica_id: str) -> None:
    """The wired discovery, its lease and cadence on the test's clocks (a fake clock, not sleeps)."""
    stack.discovery.lease = Lease(
        backend,
        ROLE,
        replica_id,
        ttl=TTL,
        clock=clocks.wall,
        monotonic=clocks.mono,
        metrics=stack.metrics.roles,
    )
    stack.discovery.monotonic = clocks.mono
    stack.discovery.interval = INTERVAL_S


@pytest.fixture
def emulator(request: pytest.FixtureRequest) -> Iterator[RunningEmulator]:
    with start_emulator(_seed(getattr(request, "param", 2))) as running:
        yield running


@pytest.fixture
async def fleet(emulator: RunningEmulator, tmp_path: Path) -> AsyncIterator[Fleet]:
    backend = LocalBackend(tmp_path / "state")
    clocks = Clocks()
    a = await build_stack(emulator, backend, is_cloud=False, replica_id="replica-a")
    b = await build_stack(emulator, backend, is_cloud=False, replica_id="replica-b")
    _on_clocks(a, backend, clocks, "replica-a")
    _on_clocks(b, backend, clocks, "replica-b")
    emulator.stats.reset()
    yield Fleet(emulator, backend, a, b, clocks)
    await a.aclose()
    await b.aclose()


def _metric(stack: WorkerStack, name: str, **labels: str) -> float:
    return stack.metrics.registry.get_sample_value(name, labels) or 0.0


async def test_only_the_lease_holder_lists_chats_and_the_other_gate_learns_members_from_the_snapshot(
    fleet: Fleet,
) -> None:
    assert fleet.b.discovery.gate.is_sponsor(fleet.guest_id, fleet.shared_chat) is False
    for _ in range(3):  # three intervals, each cycle due: a sync on both, a walk on the holder
        await fleet.a.discovery.cycle()
        walked = fleet.chat_lists()
        await fleet.b.discovery.cycle()
        assert fleet.chat_lists() == walked  # b never lists chats
        assert fleet.a.discovery.lease.held() and not fleet.b.discovery.lease.held()
        fleet.clocks.advance(INTERVAL_S)
    assert fleet.chat_lists() == 3
    assert fleet.b.discovery.gate.is_sponsor(fleet.guest_id, fleet.shared_chat)
    assert (
        fleet.b.watched.chats == fleet.a.watched.chats == {c.id for c in fleet.emulator.seed.chats}
    )
    stored = parse_chat_members(await fleet.backend.read_text(CHAT_MEMBERS_KEY) or "")
    assert fleet.guest_id in {m.user_id for m in stored[fleet.shared_chat]}


async def test_the_snapshot_is_rewritten_only_when_the_members_changed(fleet: Fleet) -> None:
    await fleet.a.discovery.cycle()
    _, first = await fleet.backend.read_text_with_etag(CHAT_MEMBERS_KEY)
    fleet.clocks.advance(INTERVAL_S)
    await fleet.a.discovery.cycle()
    assert fleet.chat_lists() == 2  # walked again, found the same members
    _, second = await fleet.backend.read_text_with_etag(CHAT_MEMBERS_KEY)
    assert second == first
    assert _metric(fleet.a, "entrabot_chat_members_snapshot_writes_total", outcome="written") == 1
    assert _metric(fleet.a, "entrabot_chat_members_snapshot_writes_total", outcome="unchanged") == 1


async def test_a_holder_that_stops_renewing_stops_walking_and_the_other_takes_over_after_expiry(
    fleet: Fleet,
) -> None:
    await fleet.a.discovery.cycle()
    await fleet.b.discovery.cycle()
    assert fleet.chat_lists() == 1
    fleet.clocks.advance(TTL.total_seconds())  # a paused (no renewal); its lease has expired
    assert not fleet.a.discovery.lease.held()
    await fleet.b.discovery.cycle()
    # b holds the role now; a walked at most an interval and a ttl ago, so b's first step waits an
    # interval (walking at once would double the fleet's discovery cost for that interval).
    assert fleet.b.discovery.lease.held() and fleet.chat_lists() == 1
    await (
        fleet.a.discovery.cycle()
    )  # a is back, its walk due (an interval passed): the role is b's now
    assert not fleet.a.discovery.lease.held() and fleet.chat_lists() == 1
    fleet.clocks.advance(INTERVAL_S)
    await fleet.b.discovery.cycle()
    assert fleet.chat_lists() == 2


@pytest.mark.parametrize("emulator", [130], indirect=True)
async def test_a_cold_walk_covers_every_chat_at_once_and_a_steady_one_resumes_where_it_stopped(
    fleet: Fleet,
) -> None:
    every = {c.id for c in fleet.emulator.seed.chats}  # 131 chats: three pages of 50
    fleet.a.discovery.pages_per_walk = 1
    await fleet.a.discovery.cycle()
    # Every page found chats not watched yet, which the quiet-page cap does not count: one step.
    assert fleet.chat_lists() == 3 and fleet.a.watched.chats == every
    fleet.clocks.advance(INTERVAL_S)
    for step in range(1, 4):
        await fleet.a.discovery.cycle()
        assert (
            fleet.chat_lists() == 3 + step
        )  # one quiet page per interval, never the whole walk at once
        await fleet.a.discovery.cycle()  # not due yet: no page
        assert fleet.chat_lists() == 3 + step
        fleet.clocks.advance(INTERVAL_S)
    assert _metric(fleet.a, "entrabot_discovery_walks_total", outcome="paused") == 2
    assert _metric(fleet.a, "entrabot_discovery_walks_total", outcome="complete") == 2
    assert fleet.a.discovery.gate.is_sponsor(fleet.guest_id, fleet.shared_chat)


class WatchedAtEachPage(GraphChats):
    """The replica's Graph chats, noting how many chats the replica watches as each chats page is asked for."""

    def __init__(self, chats: GraphChats, watched: WatchedChats) -> None:
        self.__dict__.update(chats.__dict__)
        self._watched = watched
        self.seen: list[int] = []

    async def my_chats_page(self, next_link: str | None = None) -> Page[Chat]:
        self.seen.append(len(self._watched.chats))
        return await super().my_chats_page(next_link)


@pytest.mark.parametrize("emulator", [130], indirect=True)
async def test_a_long_cold_walk_registers_its_chats_as_it_goes(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(discovery_module, "REGISTER_EVERY_PAGES", 1)
    graph = WatchedAtEachPage(fleet.a.discovery.graph.chats, fleet.a.watched)
    fleet.a.discovery.graph = with_chats(fleet.a.discovery.graph, graph)
    await fleet.a.discovery.cycle()
    assert graph.seen == [
        0,
        50,
        100,
    ]  # the fleet reads the first pages' chats while the walk goes on
    assert len(fleet.a.watched.chats) == 131


async def test_a_corrupt_snapshot_is_unknown_members_and_the_holder_replaces_it(
    fleet: Fleet, caplog: pytest.LogCaptureFixture
) -> None:
    await fleet.a.discovery.cycle()  # a holds the role and wrote the snapshot
    await fleet.backend.write_text(CHAT_MEMBERS_KEY, '{"chats": {"19:x": "not a list"}}')
    await fleet.b.discovery.cycle()
    assert not fleet.b.discovery.lease.held()
    assert not fleet.b.discovery.gate.is_sponsor(
        fleet.guest_id, fleet.shared_chat
    )  # unknown members
    fleet.clocks.advance(INTERVAL_S)
    await fleet.b.discovery.cycle()  # a has not walked again yet: still corrupt, not logged again
    assert not fleet.b.discovery.gate.is_sponsor(fleet.guest_id, fleet.shared_chat)
    assert _metric(fleet.b, "entrabot_chat_members_snapshot_reads_total", outcome="corrupt") == 2
    assert len([r for r in caplog.records if "snapshot is corrupt" in r.getMessage()]) == 1
    await fleet.a.discovery.cycle()  # the holder's walk replaces it (If-Match on the corrupt blob)
    stored = parse_chat_members(await fleet.backend.read_text(CHAT_MEMBERS_KEY) or "")
    assert "19:x" not in stored and fleet.shared_chat in stored
    fleet.clocks.advance(INTERVAL_S)
    await fleet.b.discovery.cycle()
    assert fleet.b.discovery.gate.is_sponsor(fleet.guest_id, fleet.shared_chat)


async def test_a_chat_registered_by_a_non_holder_shares_its_members_with_the_fleet(
    fleet: Fleet,
) -> None:
    await fleet.a.discovery.cycle()
    await fleet.b.discovery.cycle()
    seed = fleet.emulator.seed
    chat, _ = fleet.emulator.state.create_chat(
        "group",
        [seed.agent_user.id, seed.humans[1].id, fleet.guest_id],
        topic="New",
        initiator=seed.agent_user.id,
    )
    await fleet.b.discovery.register_chat(
        chat.id
    )  # what create_chat does on the replica that made it
    assert fleet.b.discovery.gate.is_sponsor(fleet.guest_id, chat.id)
    assert chat.id in fleet.b.watched
    walked = fleet.chat_lists()
    fleet.a.discovery.pages_per_walk = (
        0  # a learns the chat from the snapshot, not from a walk of its own
    )
    fleet.clocks.advance(INTERVAL_S)
    await fleet.a.discovery.cycle()
    assert fleet.a.discovery.gate.is_sponsor(fleet.guest_id, chat.id)
    assert chat.id in fleet.a.watched
    assert fleet.chat_lists() == walked


@pytest.mark.parametrize("emulator", [130], indirect=True)
async def test_a_holder_whose_renewal_fails_mid_walk_stops_at_once_and_writes_nothing(
    fleet: Fleet,
) -> None:
    discovery = fleet.a.discovery
    # The first lease write (the acquisition) lands; every renewal after it fails.
    faulty = FaultyBackend(fleet.backend)
    faulty.add(
        FaultRule(Fault.WRITE_FAILS, key=lease_key("discovery"), ops=frozenset({Op.WRITE}), skip=1)
    )
    discovery.lease = Lease(
        faulty,
        "discovery",
        "replica-a",
        ttl=TTL,
        clock=fleet.clocks.wall,
        monotonic=fleet.clocks.mono,
        metrics=RoleMetrics(),
    )
    discovery.graph = with_chats(
        discovery.graph, SlowPages(discovery.graph.chats, fleet.clocks, discovery.interval_s + 1)
    )  # renewal due after a page
    await discovery.cycle()
    assert fleet.chat_lists() == 1  # one page of three, then the failed renewal stopped the walk
    assert not discovery.lease.held()
    assert _metric(fleet.a, "entrabot_discovery_walks_total", outcome="lease_lost") == 1
    assert await fleet.backend.read_text(CHAT_MEMBERS_KEY) is None
    assert await fleet.backend.read_text(TEAMS_CHATS.watched_key) is None

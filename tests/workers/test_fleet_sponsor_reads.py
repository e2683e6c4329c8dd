"""Three replicas on one store share the sponsor list: Graph's sponsors are read once per refresh interval by
the fleet, not once per replica, and every replica's gate still learns them (and loses a removed one
within the interval). The emulator over real HTTP; the store is one LocalBackend; the clocks are driven."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from worker_stack import WorkerStack, build_stack

from emulator.seed import ThrottleBudget, build_seed
from emulator.server import RunningEmulator, start_emulator
from service.delivery.sponsor_refresh import RefreshOutcome, SponsorRefresher
from service.storage.local import LocalBackend

SPONSORS_ROUTE = "/v1.0/servicePrincipals/{id}/microsoft.graph.agentIdentity/sponsors"


class DrivenClocks:
    """One monotonic and one wall clock for the whole fleet, moved together."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.wall = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.wall += timedelta(seconds=seconds)


@pytest.fixture
def emulator() -> Iterator[RunningEmulator]:
    with start_emulator(build_seed(chats=2, throttle=ThrottleBudget.relaxed())) as running:
        yield running


@pytest.fixture
async def fleet(emulator: RunningEmulator, tmp_path: Path) -> AsyncIterator[list[WorkerStack]]:
    store = LocalBackend(tmp_path / "state")
    stacks = [
        await build_stack(emulator, store, is_cloud=False, replica_id=f"replica-{i}")
        for i in range(3)
    ]
    yield stacks
    for stack in stacks:
        await stack.aclose()


@pytest.fixture
def clocks(fleet: list[WorkerStack]) -> DrivenClocks:
    driven = DrivenClocks()
    for stack in fleet:
        refresher(stack).monotonic = driven
        stack.discovery.gate.monotonic = driven
        shared = refresher(stack).shared
        assert shared is not None
        shared.clock = lambda: driven.wall
    return driven


def refresher(stack: WorkerStack) -> SponsorRefresher:
    assert stack.discovery.sponsors is not None
    return stack.discovery.sponsors


def sponsor_reads(emulator: RunningEmulator) -> int:
    return len([r for r in emulator.stats.recent() if r.route == SPONSORS_ROUTE])


async def test_three_replicas_sponsor_gates_cost_one_graph_sponsors_request_per_interval(
    fleet: list[WorkerStack], emulator: RunningEmulator, clocks: DrivenClocks
) -> None:
    ada = emulator.seed.sponsors[0]
    interval = refresher(fleet[0]).interval_s
    for n in range(1, 4):
        outcomes = [await refresher(stack).refresh_if_due() for stack in fleet]
        assert sorted(o.value for o in outcomes if o is not None) == ["read", "shared", "shared"]
        assert sponsor_reads(emulator) == n  # one per interval for the fleet, not three
        assert all(stack.discovery.gate.sponsor_ids == {ada.id} for stack in fleet)
        clocks.advance(interval)


async def test_a_removed_sponsor_stops_counting_on_every_replica_within_the_interval(
    fleet: list[WorkerStack], emulator: RunningEmulator, clocks: DrivenClocks
) -> None:
    ada = emulator.seed.sponsors[0]
    for stack in fleet:
        await refresher(stack).refresh_if_due()
    with httpx.Client(base_url=emulator.admin_url, timeout=10) as http:
        http.delete(
            f"/agent_identities/{emulator.seed.agent_identity.id}/sponsors/{ada.id}"
        ).raise_for_status()
    clocks.advance(refresher(fleet[0]).interval_s)
    # The fleet's replicas tick in any order: whichever is first reads Graph, the others take its list.
    for stack in reversed(fleet):
        await refresher(stack).refresh_if_due()
    assert all(stack.discovery.gate.sponsor_ids == frozenset() for stack in fleet)
    assert sponsor_reads(emulator) == 2


async def test_a_list_taken_from_the_record_stops_counting_when_its_graph_read_goes_stale(
    fleet: list[WorkerStack], emulator: RunningEmulator, clocks: DrivenClocks
) -> None:
    ada = emulator.seed.sponsors[0]
    first, second = refresher(fleet[0]), refresher(fleet[1])
    assert await first.refresh() is RefreshOutcome.READ
    clocks.advance(first.interval_s - 1)
    assert await second.refresh() is RefreshOutcome.SHARED  # the list is interval - 1 s old
    # Nobody refreshes again: the copy counts until stale_after_s after the *Graph* read, not the copy.
    clocks.advance(first.stale_after_s - first.interval_s)
    assert fleet[1].discovery.gate.sponsor_ids == {ada.id}
    clocks.advance(1)
    assert fleet[1].discovery.gate.sponsor_ids == frozenset()

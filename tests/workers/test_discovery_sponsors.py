"""Every replica's discovery cycle re-reads the agent identity's sponsors as Graph allows it: the list with
the agent identity's app-only token (Graph refuses a delegated one), each reference resolved once to a
user (and its profile) with the agent user's token; a removed sponsor stops counting within one refresh
interval, and an unreadable list stands for a bounded time, then no sponsor counts at all.
The emulator over real HTTP; the store is a LocalBackend; the refresher's clock is driven."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from worker_stack import WorkerStack, build_stack

from emulator.seed import Seed, ThrottleBudget, build_seed
from emulator.server import RunningEmulator, start_emulator
from service.delivery.sponsor_refresh import RefreshOutcome, SponsorRefresher
from service.domain.sponsors import SponsorGate
from service.graph.models import ChatMember
from service.storage.local import LocalBackend

SPONSORS_ROUTE = "/v1.0/servicePrincipals/{id}/microsoft.graph.agentIdentity/sponsors"
GROUP_ID = "6a0c0000-0000-4000-8000-0000000a0c00"


class DrivenClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def with_group_sponsor(seed: Seed, shape: str = "id_only") -> Seed:
    identity = seed.agent_identity.model_copy(update={"group_sponsors": (GROUP_ID,)})
    return seed.model_copy(update={"agent_identities": (identity,), "sponsors_shape": shape})


@pytest.fixture(params=["id_only", "typed"])
def emulator(request: pytest.FixtureRequest) -> Iterator[RunningEmulator]:
    seed = with_group_sponsor(build_seed(chats=2, throttle=ThrottleBudget.relaxed()), request.param)
    with start_emulator(seed) as running:
        yield running


@pytest.fixture
async def stack(emulator: RunningEmulator, tmp_path: Path) -> AsyncIterator[WorkerStack]:
    built = await build_stack(emulator, LocalBackend(tmp_path / "state"), is_cloud=False)
    yield built
    await built.aclose()


@pytest.fixture
def clock(stack: WorkerStack) -> DrivenClock:
    driven = DrivenClock()
    refresher(stack).monotonic = driven
    stack.discovery.gate.monotonic = driven
    return driven


def refresher(stack: WorkerStack) -> SponsorRefresher:
    assert stack.discovery.sponsors is not None
    return stack.discovery.sponsors


def admin(emulator: RunningEmulator) -> httpx.Client:
    return httpx.Client(base_url=emulator.admin_url, timeout=10)


def fault(emulator: RunningEmulator, route_pattern: str) -> None:
    # 403: an answer the client does not retry, so the cycle sees the failure at once.
    with admin(emulator) as http:
        http.post(
            "/faults", json={"status": 403, "route_pattern": route_pattern}
        ).raise_for_status()


def clear_faults(emulator: RunningEmulator) -> None:
    with admin(emulator) as http:
        http.delete("/faults").raise_for_status()


async def test_sponsors_are_listed_with_the_agent_identitys_app_only_token(
    stack: WorkerStack, emulator: RunningEmulator
) -> None:
    await stack.discovery.cycle()
    ada = emulator.seed.sponsors[0]
    assert stack.discovery.gate.sponsor_ids == {ada.id}
    (read,) = [r for r in emulator.stats.recent() if r.route == SPONSORS_ROUTE]
    assert (read.status, read.app_id, read.user_id) == (200, emulator.seed.agent_identity.id, None)


async def test_a_sponsors_profile_is_read_so_their_other_account_is_recognised(
    stack: WorkerStack, emulator: RunningEmulator
) -> None:
    await stack.discovery.cycle()
    ada = emulator.seed.sponsors[0]
    gate: SponsorGate = stack.discovery.gate
    # Ada posting as a guest account under her own address: known only from her profile's UPN.
    guest = ChatMember.model_validate(
        {
            "id": "m1",
            "userId": "guest-object-id",
            "email": ada.user_principal_name,
            "tenantId": emulator.seed.tenant_id,
        }
    )
    gate.refresh_chat("chat-x", [guest])
    assert gate.is_sponsor("guest-object-id", "chat-x")


async def test_without_the_app_only_client_no_sponsor_is_recognised(
    stack: WorkerStack, emulator: RunningEmulator
) -> None:
    refresher(stack).directory = None
    await stack.discovery.cycle()
    assert stack.discovery.gate.sponsor_ids == frozenset()
    assert not [r for r in emulator.stats.recent() if r.route == SPONSORS_ROUTE]


async def test_a_delegated_sponsor_read_is_refused_and_recognises_nobody(
    stack: WorkerStack, emulator: RunningEmulator
) -> None:
    # What the service did before: list sponsors with the agent user's token. Graph answers 403.
    refresher(stack).directory = stack.graph
    await stack.discovery.cycle()
    assert stack.discovery.gate.sponsor_ids == frozenset()
    (read,) = [r for r in emulator.stats.recent() if r.route == SPONSORS_ROUTE]
    assert (read.status, read.user_id) == (403, emulator.seed.agent_user.id)


async def test_a_removed_sponsor_stops_counting_within_one_refresh_interval(
    stack: WorkerStack, emulator: RunningEmulator, clock: DrivenClock
) -> None:
    ada = emulator.seed.sponsors[0]
    gate = stack.discovery.gate
    await stack.discovery.cycle()
    assert gate.is_directory_sponsor(ada.id)
    with admin(emulator) as http:
        http.delete(
            f"/agent_identities/{emulator.seed.agent_identity.id}/sponsors/{ada.id}"
        ).raise_for_status()
    clock.now += refresher(stack).interval_s
    await stack.discovery.cycle()
    assert not gate.is_sponsor(ada.id) and not gate.is_directory_sponsor(ada.id)
    assert gate.sponsor_ids == frozenset()


async def test_an_unreadable_list_stands_for_the_stale_bound_then_no_sponsor_counts(
    stack: WorkerStack, emulator: RunningEmulator, clock: DrivenClock
) -> None:
    ada = emulator.seed.sponsors[0]
    gate, sponsors = stack.discovery.gate, refresher(stack)
    assert await sponsors.refresh() is RefreshOutcome.READ
    fault(emulator, r"/sponsors$")
    clock.now += sponsors.stale_after_s - 1
    assert await sponsors.refresh() is RefreshOutcome.KEPT_STALE
    assert gate.sponsor_ids == {ada.id}
    clock.now += 1
    assert await sponsors.refresh() is RefreshOutcome.FAILED_CLOSED
    assert gate.sponsor_ids == frozenset()
    assert stack.metrics.changes.sponsor_reads.labels(outcome="failed_closed")._value.get() == 1
    clear_faults(emulator)
    assert await sponsors.refresh() is RefreshOutcome.READ
    assert gate.sponsor_ids == {ada.id}


async def test_a_list_never_read_recognises_no_sponsor(
    stack: WorkerStack, emulator: RunningEmulator
) -> None:
    fault(emulator, r"/sponsors$")
    assert await refresher(stack).refresh() is RefreshOutcome.FAILED_CLOSED
    assert stack.discovery.gate.sponsor_ids == frozenset()


async def test_a_group_sponsor_is_resolved_once_and_never_counts(
    stack: WorkerStack, emulator: RunningEmulator, clock: DrivenClock
) -> None:
    ada = emulator.seed.sponsors[0]
    await stack.discovery.cycle()
    clock.now += refresher(stack).interval_s
    await stack.discovery.cycle()
    assert stack.discovery.gate.sponsor_ids == {ada.id}
    assert not stack.discovery.gate.is_sponsor(GROUP_ID)
    # Both refreshes listed; each reference was resolved at most once (typed: the group never asked).
    reads = [r for r in emulator.stats.recent() if r.route == SPONSORS_ROUTE]
    resolutions = [r.path for r in emulator.stats.recent() if r.path.startswith("/v1.0/users/")]
    assert len(reads) == 2
    expected = {f"/v1.0/users/{ada.id}"} | (
        {f"/v1.0/users/{GROUP_ID}"} if emulator.seed.sponsors_shape == "id_only" else set()
    )
    assert sorted(resolutions) == sorted(expected)


async def test_an_unresolved_reference_is_no_sponsor_until_a_later_refresh_resolves_it(
    stack: WorkerStack, emulator: RunningEmulator, clock: DrivenClock
) -> None:
    ada = emulator.seed.sponsors[0]
    fault(emulator, r"^/v1.0/users/")
    await stack.discovery.cycle()
    # Typed, a user whose profile is unreadable still counts by object id; untyped, nothing says it is a user.
    typed = emulator.seed.sponsors_shape == "typed"
    assert stack.discovery.gate.sponsor_ids == ({ada.id} if typed else frozenset())
    clear_faults(emulator)
    clock.now += refresher(stack).interval_s
    await stack.discovery.cycle()
    assert stack.discovery.gate.sponsor_ids == {ada.id}


async def test_a_list_no_refresh_follows_stops_counting_at_the_stale_bound(
    stack: WorkerStack, emulator: RunningEmulator, clock: DrivenClock
) -> None:
    # The refresh loop stopped (a dead discovery loop): nothing replaces the list, yet it expires.
    ada = emulator.seed.sponsors[0]
    gate = stack.discovery.gate
    await refresher(stack).refresh()
    clock.now += refresher(stack).stale_after_s - 1
    assert gate.is_directory_sponsor(ada.id)
    clock.now += 1
    assert not gate.is_sponsor(ada.id) and not gate.is_directory_sponsor(ada.id)
    assert gate.sponsor_ids == frozenset()

"""The fleet-wide Graph hold over real HTTP: two replicas' Graph clients on the emulator, sharing one store.

Each "replica" is a GraphClient with its own hold and a FleetBackoff on the same LocalBackend; its
backoff loop is run by hand (``cycle``), as the replica's supervisor would once a second. What Graph
saw is read from the emulator's statistics; the only time figure, the gap before the second
replica's request, is a lower bound the hold guarantees.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from emulator.seed import build_seed
from service.graph import GraphClient, GraphServerError
from service.graph.retry_policy import RetryPolicy
from service.ledger.fleet.graph_backoff import BACKOFF_KEY, FleetBackoff
from service.storage.local import LocalBackend
from service.telemetry.metrics import LedgerMetrics, RoleMetrics
from tests.graph.test_against_emulator import Tenant, running_tenant

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


class SharedClock:
    """One fake wall clock for the replicas' backoff records and their clients; sleeping moves it."""

    def __init__(self) -> None:
        self.now = T0
        self.slept: list[float] = []

    def wall(self) -> datetime:
        return self.now

    def epoch(self) -> float:
        return self.now.timestamp()

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += timedelta(seconds=seconds)

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
async def tenant() -> AsyncIterator[Tenant]:
    async with running_tenant(build_seed(chats=1, humans=2, history=1)) as t:
        yield t


async def graph_requests(tenant: Tenant) -> list[int]:
    return [r["status"] for r in (await tenant.stats())["recent"] if r["path"] == "/v1.0/me"]


async def test_a_replicas_503_with_retry_after_holds_another_replica_sharing_the_store(
    tenant: Tenant, tmp_path: Path
) -> None:
    store = LocalBackend(tmp_path / "store")
    backoff_a, backoff_b = (
        FleetBackoff(store, "replica-a", metrics=RoleMetrics(), ledger_metrics=LedgerMetrics()),
        FleetBackoff(store, "replica-b", metrics=RoleMetrics(), ledger_metrics=LedgerMetrics()),
    )
    slept_b: list[float] = []

    async def sleep_b(seconds: float) -> None:
        slept_b.append(seconds)
        await asyncio.sleep(seconds)

    a = tenant.client(shared_hold=backoff_a, retry_policy=RetryPolicy(max_attempts=1))
    b = tenant.client(shared_hold=backoff_b, sleep=sleep_b)
    await a.directory.get_me()
    await b.directory.get_me()  # tokens and connections first, so only the rule's requests follow
    await tenant.admin("POST", "stats/reset")
    await tenant.admin(
        "POST",
        "faults",
        {"status": 503, "route_pattern": "^/v1.0/me$", "count": 1, "retry_after": 2},
    )

    with pytest.raises(GraphServerError):
        await a.directory.get_me()
    await asyncio.wait_for(
        backoff_a.announced(), timeout=5
    )  # what wakes replica A's backoff loop at once
    await backoff_a.cycle()  # A stores the hold
    await backoff_b.cycle()  # B's loop reads it
    me = await b.directory.get_me()

    assert me.id == tenant.seed.agent_user.id
    calls = [r for r in (await tenant.stats())["recent"] if r["path"] == "/v1.0/me"]
    assert [r["status"] for r in calls] == [503, 200]
    assert (
        calls[1]["monotonic"] - calls[0]["monotonic"] >= 2.0
    )  # B never saw the 503, yet waited it out
    assert len(slept_b) == 1
    assert (
        tenant.metrics.registry.get_sample_value("entrabot_graph_holds_total", {"cause": "fleet"})
        == 1
    )


async def test_a_shared_hold_that_has_ended_holds_no_one(tenant: Tenant, tmp_path: Path) -> None:
    store = LocalBackend(tmp_path / "store")
    clock = SharedClock()
    writer = FleetBackoff(
        store, "replica-a", clock=clock.wall, metrics=RoleMetrics(), ledger_metrics=LedgerMetrics()
    )
    writer.announce(clock.epoch() + 5, 503, "me")
    await writer.cycle()

    clock.advance(6)
    reader = FleetBackoff(
        store, "replica-b", clock=clock.wall, metrics=RoleMetrics(), ledger_metrics=LedgerMetrics()
    )
    await reader.cycle()
    client = tenant.client(shared_hold=reader, clock=clock.epoch, sleep=clock.sleep)
    await client.directory.get_me()

    assert reader.known is not None and reader.known.writer == "replica-a"  # read, and over
    assert clock.slept == []
    assert await graph_requests(tenant) == [200]


async def test_a_corrupt_shared_backoff_does_not_stop_graph_use_is_logged_once_and_is_overwritten(
    tenant: Tenant, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = LocalBackend(tmp_path / "store")
    await store.write_text(BACKOFF_KEY, "<html><body>502 Bad Gateway</body></html>")
    clock = SharedClock()
    reader = FleetBackoff(
        store,
        "replica-b",
        clock=clock.wall,
        metrics=tenant.metrics.roles,
        ledger_metrics=tenant.metrics.ledger,
    )
    client = tenant.client(shared_hold=reader, clock=clock.epoch, sleep=clock.sleep)

    with caplog.at_level(logging.WARNING, logger="service.ledger.fleet.graph_backoff"):
        for _ in range(3):
            await reader.cycle()
            await client.directory.get_me()
    assert clock.slept == [] and await graph_requests(tenant) == [200, 200, 200]
    [warning] = [
        r for r in caplog.records if r.name == "service.ledger.fleet.graph_backoff"
    ]  # once, not per cycle
    assert "corrupt" in warning.getMessage()
    events = tenant.metrics.registry.get_sample_value(
        "entrabot_graph_fleet_backoff_events_total", {"event": "corrupt"}
    )
    assert events == 3

    # The next replica told to hold repairs the record, and the fleet holds again.
    writer = FleetBackoff(
        store, "replica-a", clock=clock.wall, metrics=RoleMetrics(), ledger_metrics=LedgerMetrics()
    )
    writer.announce(clock.epoch() + 4, 503, "me")
    await writer.cycle()
    await reader.cycle()
    await client.directory.get_me()
    assert clock.slept == [4.0]


async def test_an_implausible_shared_hold_does_not_stop_graph_use(
    tenant: Tenant, tmp_path: Path
) -> None:
    store = LocalBackend(tmp_path / "store")
    clock = SharedClock()
    wrong_clock = FleetBackoff(
        store,
        "replica-a",
        clock=lambda: T0 + timedelta(days=365),
        metrics=RoleMetrics(),
        ledger_metrics=LedgerMetrics(),
    )
    wrong_clock.announce((T0 + timedelta(days=365, seconds=30)).timestamp(), 429, "me")
    await (
        wrong_clock.cycle()
    )  # a replica whose clock is a year ahead: its hold would never end here

    reader = FleetBackoff(
        store, "replica-b", clock=clock.wall, metrics=RoleMetrics(), ledger_metrics=LedgerMetrics()
    )
    await reader.cycle()
    client: GraphClient = tenant.client(shared_hold=reader, clock=clock.epoch, sleep=clock.sleep)
    await client.directory.get_me()
    assert reader.held_until() == 0.0 and clock.slept == []

"""The shared Graph backoff record: a hold only grows, racing writers keep the longest, and no storage
failure (a lost race, a write whose outcome is unknown, an unreadable store) ever raises into the loop."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest

from service.ledger.fleet.graph_backoff import (
    BACKOFF_KEY,
    BackoffRecord,
    CorruptBackoff,
    FleetBackoff,
    extends,
    implausible,
    parse_backoff,
    parse_stored,
    render_backoff,
)
from service.storage.backend import MemoryBackend
from service.storage.faults import Fault, FaultRule, FaultyBackend
from service.storage.local import LocalBackend
from service.telemetry.metrics import LedgerMetrics, Metrics, RoleMetrics
from tests.ledger.ledger_helpers import T0, FakeClock

HOLD = timedelta(seconds=60)
SKEW = timedelta(seconds=30)


def record(until_s: float, *, written_s: float = 0.0, writer: str = "replica-a") -> BackoffRecord:
    return BackoffRecord(
        T0 + timedelta(seconds=until_s), T0 + timedelta(seconds=written_s), 503, "me/chats", writer
    )


async def stored(backend: MemoryBackend) -> BackoffRecord:
    return parse_backoff(await backend.read_text(BACKOFF_KEY) or "")


def test_a_record_round_trips_and_anything_else_reads_as_corrupt() -> None:
    mine = record(5)
    assert parse_backoff(render_backoff(mine)) == mine
    for text in (
        "",
        "[]",
        "<html>502</html>",
        '{"until": "2026-12-01T12:00:05Z"}',
        render_backoff(mine).replace("503", "200"),
    ):
        assert isinstance(parse_stored(text), CorruptBackoff)


def test_a_hold_only_grows_and_an_implausible_one_holds_no_one() -> None:
    def grows(stored: BackoffRecord | CorruptBackoff | None, mine: BackoffRecord) -> bool:
        return extends(stored, mine, T0, max_hold=HOLD, max_skew=SKEW)

    assert grows(None, record(5)) and grows(CorruptBackoff("x"), record(5))
    assert (
        grows(record(5), record(6))
        and not grows(record(6), record(5))
        and not grows(record(5), record(5))
    )
    assert grows(record(10**8), record(5))  # an implausible hold is replaced by a shorter real one
    assert implausible(record(60), T0, max_hold=HOLD, max_skew=SKEW) is None
    assert (
        implausible(record(3600), T0, max_hold=HOLD, max_skew=SKEW) is not None
    )  # longer than any Retry-After
    assert (
        implausible(record(3610, written_s=3600), T0, max_hold=HOLD, max_skew=SKEW) is not None
    )  # a clock ahead


async def test_racing_replicas_leave_the_longest_hold_stored_and_none_raises(
    any_backend: MemoryBackend,
) -> None:
    clock = FakeClock(T0)
    replicas = [
        FleetBackoff(
            any_backend,
            f"replica-{i}",
            clock=clock,
            metrics=RoleMetrics(),
            ledger_metrics=LedgerMetrics(),
        )
        for i in range(5)
    ]
    for i, replica in enumerate(replicas):
        replica.announce((T0 + timedelta(seconds=10 + i)).timestamp(), 429, "chats/{id}/messages")
    await asyncio.gather(*(r.cycle() for r in replicas))
    for replica in replicas:  # a loser's next cycle either finds a longer hold or stores its own
        await replica.cycle()
    assert (await stored(any_backend)).writer == "replica-4"
    for replica in replicas:  # and every replica's next read learns it
        await replica.cycle()
    assert all(r.known is not None and r.known.writer == "replica-4" for r in replicas)


async def test_a_shorter_hold_never_replaces_a_longer_one(local_store: LocalBackend) -> None:
    clock = FakeClock(T0)
    long, short = (
        FleetBackoff(
            local_store,
            "replica-a",
            clock=clock,
            metrics=RoleMetrics(),
            ledger_metrics=LedgerMetrics(),
        ),
        FleetBackoff(
            local_store,
            "replica-b",
            clock=clock,
            metrics=RoleMetrics(),
            ledger_metrics=LedgerMetrics(),
        ),
    )
    long.announce((T0 + timedelta(seconds=30)).timestamp(), 429, "me/chats")
    await long.cycle()
    short.announce((T0 + timedelta(seconds=10)).timestamp(), 503, "me")
    await short.cycle()
    assert (await stored(local_store)).writer == "replica-a"
    assert (
        short.held_until() == (T0 + timedelta(seconds=30)).timestamp()
    )  # and the shorter one learnt the longer


@pytest.mark.parametrize("fault", [Fault.WRITE_FAILS, Fault.WRITE_RESPONSE_LOST])
async def test_a_write_that_fails_or_whose_outcome_is_unknown_never_raises_and_the_hold_is_stored(
    local_store: LocalBackend, fault: Fault
) -> None:
    clock = FakeClock(T0)
    faulty = FaultyBackend(local_store)
    faulty.add(FaultRule(fault, key=BACKOFF_KEY, times=3))
    metrics = Metrics()
    replica = FleetBackoff(
        faulty, "replica-a", clock=clock, metrics=metrics.roles, ledger_metrics=metrics.ledger
    )
    replica.announce((T0 + timedelta(seconds=20)).timestamp(), 503, "me/chats")
    for _ in range(3):
        await replica.cycle()
        clock.advance(seconds=1)
    assert (await stored(local_store)).writer == "replica-a"
    assert replica.held_until() == (T0 + timedelta(seconds=20)).timestamp()


async def test_an_unreadable_store_raises_nothing_adopts_nothing_and_a_learnt_hold_still_ends(
    local_store: LocalBackend, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock(T0)
    writer = FleetBackoff(
        local_store, "replica-a", clock=clock, metrics=RoleMetrics(), ledger_metrics=LedgerMetrics()
    )
    writer.announce((T0 + timedelta(seconds=5)).timestamp(), 503, "me")
    await writer.cycle()
    faulty = FaultyBackend(local_store)
    metrics = Metrics()
    reader = FleetBackoff(
        faulty, "replica-b", clock=clock, metrics=metrics.roles, ledger_metrics=metrics.ledger
    )
    await reader.cycle()
    assert reader.held_until() == (T0 + timedelta(seconds=5)).timestamp()

    faulty.add(FaultRule(Fault.READ_FAILS, key=BACKOFF_KEY))
    writer.announce((T0 + timedelta(seconds=40)).timestamp(), 503, "me")
    await writer.cycle()  # a longer hold the reader cannot see
    with caplog.at_level(logging.WARNING, logger="service.ledger.fleet.graph_backoff"):
        for _ in range(3):
            await reader.cycle()
            clock.advance(seconds=1)
    assert (
        reader.held_until() == (T0 + timedelta(seconds=5)).timestamp()
    )  # bounded: it ends on its own
    assert len([r for r in caplog.records if r.name == "service.ledger.fleet.graph_backoff"]) == 1
    assert (
        metrics.registry.get_sample_value(
            "entrabot_graph_fleet_backoff_events_total", {"event": "read_failed"}
        )
        == 3
    )

    faulty.heal()
    await reader.cycle()
    assert reader.held_until() == (T0 + timedelta(seconds=40)).timestamp()


@pytest.mark.parametrize(
    "bogus",
    [
        render_backoff(record(10**8)),  # a hold of three years
        render_backoff(record(10**8 + 10, written_s=10**8)),  # written by a clock three years ahead
        '{"until": "9999-12-31T23:59:59Z"',  # torn
    ],
)
async def test_a_real_hold_replaces_an_implausible_or_corrupt_record_and_every_replica_holds(
    any_backend: MemoryBackend, bogus: str
) -> None:
    clock = FakeClock(T0)
    await any_backend.write_text(BACKOFF_KEY, bogus)
    writer, reader = (
        FleetBackoff(
            any_backend,
            f"replica-{n}",
            clock=clock,
            metrics=RoleMetrics(),
            ledger_metrics=LedgerMetrics(),
        )
        for n in "ab"
    )
    await reader.cycle()
    assert reader.held_until() == 0.0  # the bogus record holds no one
    writer.announce((T0 + timedelta(seconds=20)).timestamp(), 429, "me/chats")
    await writer.cycle()
    assert (await stored(any_backend)).until == T0 + timedelta(seconds=20)
    await reader.cycle()
    assert reader.held_until() == writer.held_until() == (T0 + timedelta(seconds=20)).timestamp()


async def test_a_hold_over_before_it_could_be_stored_is_not_written(
    local_store: LocalBackend,
) -> None:
    clock = FakeClock(T0)
    replica = FleetBackoff(
        local_store, "replica-a", clock=clock, metrics=RoleMetrics(), ledger_metrics=LedgerMetrics()
    )
    replica.announce((T0 + timedelta(seconds=2)).timestamp(), 503, "me")
    clock.advance(seconds=3)
    await replica.cycle()
    assert await local_store.read_text(BACKOFF_KEY) is None

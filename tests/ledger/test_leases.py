"""Leases for fleet-singleton roles: one holder at a time, renewal keeps it, expiry hands it over,
and a holder that cannot renew stops acting at once."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import pytest
from lease_clocks import T0, Clocks

from service.ledger.fleet.leases import (
    Lease,
    LeaseRecord,
    LeaseStep,
    decide_step,
    lease_key,
    parse_lease,
)
from service.storage.backend import MemoryBackend
from service.storage.faults import Fault, FaultRule, FaultyBackend
from service.storage.local import LocalBackend
from service.telemetry.metrics import Metrics, RoleMetrics

TTL = timedelta(seconds=30)


def lease(backend: MemoryBackend, holder: str, clocks: Clocks) -> Lease:
    return Lease(
        backend,
        "scanner",
        holder,
        ttl=TTL,
        clock=clocks.wall,
        monotonic=clocks.mono,
        metrics=RoleMetrics(),
    )


def test_the_rule_renews_only_an_unbroken_lease_and_takes_over_only_an_expired_one() -> None:
    record = LeaseRecord("scanner", "a", 3, T0 + TTL, T0)
    assert decide_step(None, me="a", our_etag=None, read_etag=None, now=T0) is LeaseStep.ACQUIRED
    assert decide_step(record, me="a", our_etag="e1", read_etag="e1", now=T0) is LeaseStep.RENEWED
    assert (
        decide_step(record, me="a", our_etag="e1", read_etag="e2", now=T0)
        is LeaseStep.HELD_ELSEWHERE
    )
    assert (
        decide_step(record, me="b", our_etag=None, read_etag="e1", now=T0)
        is LeaseStep.HELD_ELSEWHERE
    )
    assert (
        decide_step(record, me="b", our_etag=None, read_etag="e1", now=T0 + TTL)
        is LeaseStep.TAKEN_OVER
    )


async def test_of_many_replicas_racing_for_a_role_exactly_one_holds_it(
    any_backend: MemoryBackend,
) -> None:
    clocks = Clocks()
    leases = [lease(any_backend, f"replica-{i}", clocks) for i in range(6)]
    steps = await asyncio.gather(*(x.acquire_or_renew() for x in leases))
    assert steps.count(LeaseStep.ACQUIRED) == 1
    assert sum(x.held() for x in leases) == 1
    holder = next(x for x in leases if x.held())
    assert holder.epoch == 1
    stored = parse_lease(await any_backend.read_text(lease_key("scanner")) or "")
    assert stored.holder == holder.holder


async def test_renewal_keeps_the_role_and_the_epoch(any_backend: MemoryBackend) -> None:
    clocks = Clocks()
    a, b = lease(any_backend, "a", clocks), lease(any_backend, "b", clocks)
    assert await a.acquire_or_renew() is LeaseStep.ACQUIRED
    for _ in range(5):
        clocks.advance(a.renew_every.total_seconds())
        assert await a.acquire_or_renew() is LeaseStep.RENEWED
        assert await b.acquire_or_renew() is LeaseStep.HELD_ELSEWHERE
    assert a.held() and not b.held() and a.epoch == 1


async def test_an_expired_lease_is_taken_over_with_a_new_epoch_and_the_old_holder_has_stopped(
    any_backend: MemoryBackend,
) -> None:
    clocks = Clocks()
    a, b = lease(any_backend, "a", clocks), lease(any_backend, "b", clocks)
    await a.acquire_or_renew()
    clocks.advance((TTL - a.margin).total_seconds())
    assert not a.held()  # a stopped acting before its record expired...
    assert await b.acquire_or_renew() is LeaseStep.HELD_ELSEWHERE  # ...and before b may take over
    clocks.advance(a.margin.total_seconds())
    assert await b.acquire_or_renew() is LeaseStep.TAKEN_OVER
    assert b.held() and b.epoch == 2
    assert await a.acquire_or_renew() is LeaseStep.HELD_ELSEWHERE
    assert not a.held()


@pytest.mark.parametrize(
    "fault",
    [
        Fault.WRITE_FAILS,
        Fault.WRITE_RESPONSE_LOST,
        Fault.READ_FAILS,
        Fault.READ_CORRUPT,
        Fault.READ_MISSING_ETAG,
    ],
)
async def test_a_holder_that_cannot_renew_stops_acting_at_once(tmp_path, fault: Fault) -> None:
    clocks = Clocks()
    faulty = FaultyBackend(LocalBackend(tmp_path / "store"))
    a = lease(faulty, "a", clocks)
    await a.acquire_or_renew()
    clocks.advance(1)
    assert a.held()
    faulty.add(FaultRule(fault, key="leases/*", times=1))
    assert await a.acquire_or_renew() in (LeaseStep.LOST, LeaseStep.UNRESOLVED)
    assert not a.held()  # long before its record expires


async def test_a_holder_whose_record_was_overwritten_loses_the_race_and_stops(
    any_backend: MemoryBackend,
) -> None:
    clocks = Clocks()
    a = lease(any_backend, "a", clocks)
    await a.acquire_or_renew()
    # An operator (or another replica) rewrites the record.
    forged = LeaseRecord("scanner", "b", 7, T0 + TTL, T0)
    from service.ledger.fleet.leases import render_lease  # noqa: PLC0415

    await any_backend.write_text(lease_key("scanner"), render_lease(forged))
    assert await a.acquire_or_renew() is LeaseStep.HELD_ELSEWHERE
    assert not a.held()


def test_a_margin_as_long_as_the_ttl_is_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match="margin"):
        Lease(LocalBackend(tmp_path), "scanner", "a", ttl=TTL, margin=TTL, metrics=RoleMetrics())


async def test_a_renewal_whose_answer_was_lost_but_which_landed_keeps_the_role_at_the_next_renewal(
    tmp_path,
) -> None:
    clocks = Clocks()
    faulty = FaultyBackend(LocalBackend(tmp_path / "store"))
    a, b = lease(faulty, "a", clocks), lease(faulty, "b", clocks)
    await a.acquire_or_renew()
    clocks.advance(a.renew_every.total_seconds())
    faulty.add(FaultRule(Fault.WRITE_RESPONSE_LOST, key="leases/*", times=1))
    assert await a.acquire_or_renew() is LeaseStep.LOST
    assert not a.held()  # in doubt: not acting
    clocks.advance(1)
    assert (
        await a.acquire_or_renew() is LeaseStep.RENEWED
    )  # the record it reads back is the one it wrote
    assert a.held() and a.epoch == 1
    assert await b.acquire_or_renew() is LeaseStep.HELD_ELSEWHERE


async def test_a_write_in_doubt_that_never_landed_is_not_taken_for_ours(tmp_path) -> None:
    clocks = Clocks()
    faulty = FaultyBackend(LocalBackend(tmp_path / "store"))
    a = lease(faulty, "a", clocks)
    await a.acquire_or_renew()
    clocks.advance(a.renew_every.total_seconds())
    faulty.add(FaultRule(Fault.WRITE_FAILS, key="leases/*", times=1))
    assert await a.acquire_or_renew() is LeaseStep.LOST
    clocks.advance(1)
    # The stored record is the older one: not provably ours after a failed write, so it is left to expire.
    assert await a.acquire_or_renew() is LeaseStep.HELD_ELSEWHERE
    assert not a.held()


async def test_a_released_lease_is_taken_over_at_once_and_the_releaser_has_stopped(
    any_backend: MemoryBackend,
) -> None:
    clocks = Clocks()
    a, b = lease(any_backend, "a", clocks), lease(any_backend, "b", clocks)
    await a.acquire_or_renew()
    await a.release()
    assert not a.held()
    clocks.advance(0.001)
    assert await b.acquire_or_renew() is LeaseStep.TAKEN_OVER
    assert b.held() and b.epoch == 2


@pytest.mark.parametrize(
    "stuck",
    [
        "{not json",  # torn
        '{"role": "scanner", "holder": "b", "epoch": 4, "expires_at": "9999-01-01T00:00:00Z", '
        '"renewed_at": "2026-12-01T12:00:00Z"}',  # held until the year 9999
        '{"role": "sweep", "holder": "b", "epoch": 4, "expires_at": "2026-12-01T12:00:30Z", '
        '"renewed_at": "2026-12-01T12:00:00Z"}',  # another role's record
    ],
)
async def test_a_record_unreadable_for_a_lease_lifetime_is_taken_over_by_exactly_one_replica(
    any_backend: MemoryBackend, stuck: str
) -> None:
    clocks = Clocks()
    metrics = Metrics()
    leases = [
        Lease(
            any_backend,
            "scanner",
            f"replica-{i}",
            ttl=TTL,
            clock=clocks.wall,
            monotonic=clocks.mono,
            metrics=metrics.roles,
        )
        for i in range(3)
    ]
    await any_backend.write_text(lease_key("scanner"), stuck)
    step = leases[0].renew_every.total_seconds()
    elapsed, holders_seen = 0.0, []
    while elapsed <= (TTL + leases[0].renew_every).total_seconds():
        await asyncio.gather(*(x.acquire_or_renew() for x in leases))
        holders_seen.append(sum(x.held() for x in leases))
        clocks.advance(step)
        elapsed += step
    assert max(holders_seen) == 1 and holders_seen[-1] == 1  # never two, and one by ttl + a renewal
    assert holders_seen[0] == 0  # not taken at first sight: a holder may be rewriting it
    holder = next(x for x in leases if x.held())
    stored = parse_lease(await any_backend.read_text(lease_key("scanner")) or "")
    assert (
        stored.holder == holder.holder
        and stored.role == "scanner"
        and stored.expires_at < T0 + TTL * 3
    )
    assert holder.epoch is not None and holder.epoch > (4 if '"epoch": 4' in stuck else 0)
    taken = metrics.registry.get_sample_value(
        "entrabot_lease_events_total", {"role": "scanner", "event": "taken_unreadable"}
    )
    assert taken == 1


async def test_a_record_rewritten_within_the_lifetime_restarts_the_wait(
    any_backend: MemoryBackend,
) -> None:
    clocks = Clocks()
    a = lease(any_backend, "a", clocks)
    await any_backend.write_text(lease_key("scanner"), "{not json")
    await a.acquire_or_renew()
    clocks.advance(TTL.total_seconds() - 1)
    await any_backend.write_text(lease_key("scanner"), "{still not json")  # someone is writing it
    assert await a.acquire_or_renew() is LeaseStep.UNRESOLVED
    clocks.advance(2)
    assert await a.acquire_or_renew() is LeaseStep.UNRESOLVED and not a.held()
    clocks.advance(TTL.total_seconds())
    assert await a.acquire_or_renew() is LeaseStep.TAKEN_UNREADABLE and a.held()


def test_every_role_a_replica_knows_is_exported_as_not_held_before_any_attempt(
    tmp_path: Path,
) -> None:
    metrics = Metrics()
    Lease(LocalBackend(tmp_path), "subscriptions", "a", metrics=metrics.roles)
    assert metrics.registry.get_sample_value("entrabot_lease_held", {"role": "subscriptions"}) == 0

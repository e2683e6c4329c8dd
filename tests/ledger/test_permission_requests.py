"""The fleet's record of pending permission requests: one holder per live request id, on both backends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from service.ledger.memory.permission_requests import (
    PermissionRequests,
    ReserveOutcome,
    Standing,
    request_key,
)
from service.storage.backend import MemoryBackend
from service.telemetry.metrics import LedgerMetrics

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
TTL = timedelta(minutes=10)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


async def test_one_replica_holds_a_live_request_and_the_others_leave_its_verdict_alone(
    any_backend: MemoryBackend,
) -> None:
    clock = Clock()
    one = PermissionRequests(any_backend, "replica-1", clock=clock, metrics=LedgerMetrics())
    two = PermissionRequests(any_backend, "replica-2", clock=clock, metrics=LedgerMetrics())
    assert await one.standing("abcde") is Standing.NONE
    assert await one.reserve("abcde", TTL) is ReserveOutcome.RESERVED
    assert await two.reserve("abcde", TTL) is ReserveOutcome.TAKEN
    assert await one.standing("abcde") is Standing.HELD_HERE
    assert await two.standing("abcde") is Standing.HELD_ELSEWHERE


async def test_an_ended_or_expired_request_decides_nothing_and_its_id_can_be_reused(
    any_backend: MemoryBackend,
) -> None:
    clock = Clock()
    one = PermissionRequests(any_backend, "replica-1", clock=clock, metrics=LedgerMetrics())
    two = PermissionRequests(any_backend, "replica-2", clock=clock, metrics=LedgerMetrics())
    await one.reserve("abcde", TTL)
    assert not await two.end("abcde")  # only the holder ends it
    assert await one.end("abcde")
    assert await two.standing("abcde") is Standing.NONE
    assert await two.reserve("abcde", TTL) is ReserveOutcome.RESERVED
    clock.now += TTL
    assert await one.standing("abcde") is Standing.NONE
    assert await one.reserve("abcde", TTL) is ReserveOutcome.RESERVED


async def test_a_corrupt_record_is_unresolved_and_reserves_nothing(
    any_backend: MemoryBackend,
) -> None:
    await any_backend.write_text(request_key("abcde"), "{not json")
    requests = PermissionRequests(any_backend, "replica-1", clock=Clock(), metrics=LedgerMetrics())
    assert await requests.standing("abcde") is Standing.UNRESOLVED
    assert await requests.reserve("abcde", TTL) is ReserveOutcome.UNRESOLVED

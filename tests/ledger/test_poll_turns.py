"""One poll per interval for the whole fleet: the first replica to find the last poll an interval old
takes the turn, the others skip; every doubt resolves towards polling (it costs a request, never a
duplicate: the email ledger claims each mail once)."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

from lease_clocks import Clocks

from service.ledger.fleet.poll_turns import PollTurn, turn_key
from service.storage.backend import MemoryBackend
from service.storage.faults import Fault, FaultRule, FaultyBackend
from service.storage.local import LocalBackend

MINUTE = timedelta(minutes=1)


def turns(backend: MemoryBackend, clocks: Clocks, count: int) -> list[PollTurn]:
    return [
        PollTurn(backend, "email_poll", f"replica-{i}", MINUTE, clock=clocks.wall)
        for i in range(count)
    ]


async def test_of_six_replicas_looking_at_once_exactly_one_polls(
    any_backend: MemoryBackend,
) -> None:
    clocks = Clocks()
    fleet = turns(any_backend, clocks, 6)
    assert sum(await asyncio.gather(*(t.take() for t in fleet))) == 1
    clocks.advance(30)
    assert sum(await asyncio.gather(*(t.take() for t in fleet))) == 0  # polled 30 s ago: nobody
    clocks.advance(30)
    assert sum(await asyncio.gather(*(t.take() for t in fleet))) == 1  # an interval on: one again
    stored = json.loads(await any_backend.read_text(turn_key("email_poll")) or "")
    assert set(stored) == {"at", "by"} and stored["by"].startswith("replica-")


async def test_a_lone_replica_looking_every_interval_polls_every_time(tmp_path) -> None:
    clocks = Clocks()
    (alone,) = turns(LocalBackend(tmp_path), clocks, 1)
    taken = []
    for _ in range(5):
        taken.append(await alone.take())
        clocks.advance(59.5)  # its loop is not exactly on the minute: the slack keeps it on time
    assert taken == [True] * 5


async def test_a_corrupt_record_or_one_from_the_far_future_polls_and_is_replaced(tmp_path) -> None:
    backend, clocks = LocalBackend(tmp_path), Clocks()
    a, b = turns(backend, clocks, 2)
    await backend.write_text(turn_key("email_poll"), "{not json")
    assert await a.take() is True
    assert await b.take() is False  # a's record replaced the corrupt one
    clocks.advance(60)
    ahead = (clocks.wall() + timedelta(hours=1)).isoformat()
    await backend.write_text(turn_key("email_poll"), json.dumps({"at": ahead, "by": "clock-ahead"}))
    assert await a.take() is True  # a replica whose clock runs an hour ahead silences no one


async def test_a_storage_failure_polls_rather_than_skip(tmp_path) -> None:
    faulty = FaultyBackend(LocalBackend(tmp_path))
    clocks = Clocks()
    a, b = turns(faulty, clocks, 2)
    faulty.add(FaultRule(Fault.READ_FAILS, key=turn_key("email_poll"), times=1))
    assert await a.take() is True  # unreadable: poll
    faulty.add(FaultRule(Fault.WRITE_FAILS, key=turn_key("email_poll"), times=1))
    assert await b.take() is True  # could not record its turn: poll all the same
    assert await a.take() is True  # nothing was recorded, so the turn is still free

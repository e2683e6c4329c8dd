"""The reader roster: every replica taking the same hint gets a different turn for the chat, and
only live replicas that read chats count."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from service.ledger.readers import ReaderRoster, reader_key, turn_of
from service.storage.backend import MemoryBackend

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


class Wall:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


async def test_three_reading_replicas_take_the_three_turns_of_each_chat(any_backend: MemoryBackend) -> None:
    wall = Wall()
    rosters = [ReaderRoster(any_backend, f"replica-{i}", clock=wall) for i in range(3)]
    for roster in rosters:
        await roster.refresh(True, 0.0)
    for roster in rosters:  # the first ones listed before the others wrote; the next beat sees all
        await roster.refresh(True, 100.0)
    for chat in ("19:a@thread.v2", "19:b@thread.v2", "19:c@thread.v2", "19:d@thread.v2"):
        assert sorted(r.turn(chat) for r in rosters) == [0, 1, 2]
    firsts = {next(r.replica_id for r in rosters if r.turn(c) == 0) for c in (f"19:{i}@thread.v2" for i in range(30))}
    assert len(firsts) == 3  # no replica goes first for every chat


async def test_a_replica_without_a_target_or_silent_for_long_takes_no_turn(any_backend: MemoryBackend) -> None:
    wall = Wall()
    me, idle = ReaderRoster(any_backend, "me", clock=wall), ReaderRoster(any_backend, "idle", clock=wall)
    await idle.refresh(False, 0.0)
    await any_backend.write_text(reader_key("gone"), '{"replica": "gone", "reading": true, "at": "2026-12-01T11:00:00Z"}')
    await any_backend.write_text(reader_key("torn"), "{not json")
    await me.refresh(True, 0.0)
    assert me.readers == frozenset({"me"})
    assert me.turn("19:x@thread.v2") == 0
    wall.now = T0 + timedelta(minutes=5)
    await idle.refresh(True, 1.0)  # starts reading: said at once, not at the next beat
    await me.refresh(True, 100.0)
    assert me.readers == frozenset({"me", "idle"})


def test_the_turn_order_is_the_same_on_every_replica() -> None:
    readers = frozenset({"a", "b", "c"})
    turns = {r: turn_of(r, readers, "19:chat@thread.v2") for r in readers}
    assert sorted(turns.values()) == [0, 1, 2]


async def test_a_replica_that_leaves_takes_no_more_turns(any_backend: MemoryBackend) -> None:
    wall = Wall()
    me, other = ReaderRoster(any_backend, "me", clock=wall), ReaderRoster(any_backend, "other", clock=wall)
    await other.refresh(True, 0.0)
    await me.refresh(True, 0.0)
    assert me.readers == frozenset({"me", "other"})
    await other.leave()
    await me.refresh(True, 100.0)
    assert me.readers == frozenset({"me"})


async def test_two_replicas_starting_together_take_turns_once_settled(any_backend: MemoryBackend) -> None:
    wall = Wall()
    a, b = ReaderRoster(any_backend, "a", clock=wall), ReaderRoster(any_backend, "b", clock=wall)
    await a.refresh(True, 0.0)  # lists before b's record exists
    await b.refresh(True, 0.0)
    assert not a.settled(0.0) and a.readers == frozenset({"a"})
    await a.refresh(True, 1.0)  # not due yet
    await a.refresh(True, 2.0)  # the settling re-list
    assert a.settled(2.0) and a.readers == frozenset({"a", "b"})
    assert {a.turn("19:x@thread.v2"), b.turn("19:x@thread.v2")} == {0, 1}

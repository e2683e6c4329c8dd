"""The reader roster: every replica taking the same hint gets a different turn for the chat, and
only live replicas that read chats count."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from service.ledger.fleet.readers import (
    ROSTER_KEY,
    TURN_WINDOW,
    ReaderEntry,
    ReaderRoster,
    parse_roster,
    render_roster,
    turn_of,
    turn_window,
)
from service.storage.backend import MemoryBackend
from service.storage.local import LocalBackend

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


class Wall:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


async def test_three_reading_replicas_take_the_three_turns_of_each_chat(
    any_backend: MemoryBackend,
) -> None:
    wall = Wall()
    rosters = [ReaderRoster(any_backend, f"replica-{i}", clock=wall) for i in range(3)]
    for roster in rosters:
        await roster.refresh(True, 0.0)
    for roster in rosters:  # the first ones listed before the others wrote; the next beat sees all
        await roster.refresh(True, 100.0)
    for chat in ("19:a@thread.v2", "19:b@thread.v2", "19:c@thread.v2", "19:d@thread.v2"):
        assert sorted(r.turn(chat) for r in rosters) == [0, 1, 2]
    firsts = {
        next(r.replica_id for r in rosters if r.turn(c) == 0)
        for c in (f"19:{i}@thread.v2" for i in range(30))
    }
    assert len(firsts) == 3  # no replica goes first for every chat


async def test_a_replica_without_a_target_or_silent_for_long_takes_no_turn(
    any_backend: MemoryBackend,
) -> None:
    wall = Wall()
    me, idle = (
        ReaderRoster(any_backend, "me", clock=wall),
        ReaderRoster(any_backend, "idle", clock=wall),
    )
    await idle.refresh(False, 0.0)
    roster = parse_roster(await any_backend.read_text(ROSTER_KEY) or "")
    roster["gone"] = ReaderEntry(T0 - timedelta(hours=1), True)
    await any_backend.write_text(ROSTER_KEY, render_roster(roster))
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
    me, other = (
        ReaderRoster(any_backend, "me", clock=wall),
        ReaderRoster(any_backend, "other", clock=wall),
    )
    await other.refresh(True, 0.0)
    await me.refresh(True, 0.0)
    assert me.readers == frozenset({"me", "other"})
    await other.leave()
    await me.refresh(True, 100.0)
    assert me.readers == frozenset({"me"})


async def test_two_replicas_starting_together_take_turns_once_settled(
    any_backend: MemoryBackend,
) -> None:
    wall = Wall()
    a, b = ReaderRoster(any_backend, "a", clock=wall), ReaderRoster(any_backend, "b", clock=wall)
    await a.refresh(True, 0.0)  # lists before b's record exists
    await b.refresh(True, 0.0)
    assert not a.settled(0.0) and a.readers == frozenset({"a"})
    await a.refresh(True, 1.0)  # not due yet
    await a.refresh(True, 2.0)  # the settling re-list
    assert a.settled(2.0) and a.readers == frozenset({"a", "b"})
    assert {a.turn("19:x@thread.v2"), b.turn("19:x@thread.v2")} == {0, 1}


async def test_a_corrupt_roster_is_rewritten_and_costs_nothing_but_the_turns_it_held(
    any_backend: MemoryBackend,
) -> None:
    wall = Wall()
    await any_backend.write_text(ROSTER_KEY, "{not json")
    me = ReaderRoster(any_backend, "me", clock=wall)
    await me.refresh(True, 0.0)
    assert me.readers == frozenset({"me"})
    assert set(parse_roster(await any_backend.read_text(ROSTER_KEY) or "")) == {"me"}


class ReadCounter(LocalBackend):
    """Counts every read and listing a heartbeat sends."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.reads = 0

    async def read_text(self, key: str) -> str | None:
        self.reads += 1
        return await super().read_text(key)

    async def read_text_with_etag(self, key: str) -> tuple[str | None, str | None]:
        self.reads += 1
        return await super().read_text_with_etag(key)

    async def list(self, prefix: str = "") -> list[str]:
        self.reads += 1
        return await super().list(prefix)


async def test_a_heartbeat_costs_the_same_after_300_former_pods_and_their_entries_go(
    tmp_path: Path,
) -> None:
    wall = Wall()
    store = ReadCounter(tmp_path / "store")
    await store.write_text(
        ROSTER_KEY,
        render_roster(
            {f"pod-{i}": ReaderEntry(T0 - timedelta(minutes=i + 1), True) for i in range(300)}
        ),
    )
    live = [ReaderRoster(store, f"replica-{i}", clock=wall) for i in range(3)]
    for roster in live:
        await roster.refresh(True, 0.0)
    store.reads = 0
    await live[0].refresh(True, 100.0)
    # Before (a record per replica, measured on 5520293^): 304, one listing and a read per record under
    # readers/, the 300 dead pods' included.
    assert store.reads == 1
    assert live[0].readers == frozenset({"replica-0", "replica-1", "replica-2"})
    assert set(parse_roster(await store.read_text(ROSTER_KEY) or "")) == {
        "replica-0",
        "replica-1",
        "replica-2",
    }


async def test_each_of_three_readers_is_first_for_a_fair_share_of_one_chats_messages(
    any_backend: MemoryBackend,
) -> None:
    wall = Wall()
    rosters = [ReaderRoster(any_backend, f"replica-{i}", clock=wall) for i in range(3)]
    for now_s in (0.0, 100.0):
        for roster in rosters:
            await roster.refresh(True, now_s)
    firsts = {r.replica_id: 0 for r in rosters}
    for n in range(300):  # a busy chat's messages, one every 11 s
        written = T0 + timedelta(seconds=11 * n)
        turns = {r.replica_id: r.turn("19:busy@thread.v2", written) for r in rosters}
        assert sorted(turns.values()) == [0, 1, 2]  # one first, and the same order on every replica
        firsts[min(turns, key=turns.__getitem__)] += 1
    assert all(70 <= count <= 130 for count in firsts.values()), firsts  # a third is 100


def test_the_first_reader_of_a_chat_changes_at_most_once_a_window() -> None:
    """Graph allows one read a second per chat: only the first reader's own pacing spaces its reads,
    so messages a second apart must not each go to another replica first."""
    readers = frozenset({"a", "b", "c"})

    def first(at: datetime) -> str:
        return next(
            r for r in readers if turn_of(r, readers, "19:busy@thread.v2", turn_window(at)) == 0
        )

    seconds = int(TURN_WINDOW.total_seconds()) * 20
    firsts = [first(T0 + timedelta(seconds=s)) for s in range(seconds)]
    changes = sum(1 for before, after in zip(firsts, firsts[1:]) if before != after)
    assert 0 < changes <= 20

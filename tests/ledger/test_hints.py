"""Change hints: many writers append without racing, every reader sees each hint once, and nothing a
reader could not read is marked seen."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from service.ledger.fleet.hints import (
    Hint,
    HintLog,
    HintReader,
    parse_hint_line,
    render_hints,
    segment_key,
)
from service.storage.backend import MemoryBackend
from service.storage.faults import Fault, FaultRule, FaultyBackend
from service.storage.local import LocalBackend

T0 = datetime(2026, 12, 1, 12, 0, 30, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def hint(n: int, source: str = "scan") -> Hint:
    return Hint(f"19:chat-{n}@thread.v2", T0 + timedelta(seconds=n), f"m{n}", source)


async def test_every_reader_sees_each_hint_of_many_concurrent_writers_once(
    any_backend: MemoryBackend,
) -> None:
    clock = Clock()
    writers = [HintLog(any_backend, clock=clock) for _ in range(4)]
    readers = [HintReader(any_backend, clock=clock) for _ in range(3)]
    await asyncio.gather(
        *(w.add([hint(i * 100 + k) for k in range(25)]) for i, w in enumerate(writers))
    )
    first = [await r.poll() for r in readers]
    await writers[0].add([hint(999, "notification")])
    second = [await r.poll() for r in readers]
    for seen, more in zip(first, second, strict=True):
        assert seen is not None and more is not None
        assert sorted(h.message_id or "" for h in seen) == sorted(
            f"m{i * 100 + k}" for i in range(4) for k in range(25)
        )
        assert more == [hint(999, "notification")]
    assert [await r.poll() for r in readers] == [[], [], []]


async def test_a_reader_follows_into_the_next_minute_and_forgets_old_segments(
    any_backend: MemoryBackend,
) -> None:
    clock = Clock()
    log, reader = HintLog(any_backend, clock=clock), HintReader(any_backend, clock=clock)
    await log.add([hint(1)])
    assert await reader.poll() == [hint(1)]
    clock.now += timedelta(seconds=45)  # the next minute's segment
    await log.add([hint(2)])
    assert segment_key(clock.now) != segment_key(T0)
    assert await reader.poll() == [hint(2)]
    clock.now += timedelta(minutes=5)
    assert await reader.poll() == []


async def test_an_unreadable_segment_marks_nothing_seen(tmp_path) -> None:
    clock = Clock()
    faulty = FaultyBackend(LocalBackend(tmp_path / "store"))
    log, reader = HintLog(faulty, clock=clock), HintReader(faulty, clock=clock)
    await log.add([hint(1), hint(2)])
    faulty.add(FaultRule(Fault.READ_FAILS, key="hints/*", times=1, skip=1))
    assert await reader.poll() is None
    assert await reader.poll() == [hint(1), hint(2)]


def test_lines_that_are_not_hints_are_skipped() -> None:
    good = render_hints([hint(1)]).strip()
    assert parse_hint_line(good) == hint(1)
    for bad in [
        "",
        "{",
        "[]",
        '{"c": 1, "t": "2026-12-01T12:00:00Z"}',
        '{"c": "x", "t": "yesterday"}',
        '{"c": "x"}',
        '{"c": "x", "t": "2026-12-01T12:00:00Z", "m": 5}',
    ]:
        assert parse_hint_line(bad) is None


async def test_a_torn_last_line_waits_for_its_end(tmp_path) -> None:
    backend = LocalBackend(tmp_path / "store")
    clock = Clock()
    reader = HintReader(backend, clock=clock)
    whole = render_hints([hint(1)])
    await backend.append_text(segment_key(T0), whole + whole[:10])
    assert await reader.poll() == [hint(1)]
    await backend.append_text(segment_key(T0), whole[10:])
    assert await reader.poll() == [hint(1)]

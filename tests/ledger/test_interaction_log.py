"""The interaction log: one JSON line per event in the UTC day's file, read back with filters."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import timedelta

import pytest

from service.ledger.memory.interactions import (
    Action,
    Channel,
    Direction,
    Interaction,
    InteractionLog,
    InteractionQuery,
    interaction_key,
)
from service.storage.backend import MemoryBackend
from service.storage.faults import Fault, FaultRule, FaultyBackend
from tests.ledger.ledger_helpers import T0, FakeClock


def event(
    minutes: int,
    *,
    direction: Direction = Direction.IN,
    chat: str = "chat-1",
    sender: str = "ana",
    action: str = Action.RECEIVED.value,
    body: str | None = None,
) -> Interaction:
    return Interaction(
        ts=T0 + timedelta(minutes=minutes),
        direction=direction,
        channel=Channel.CHAT,
        action=action,
        chat_id=chat,
        message_id=f"m{minutes}",
        sender=sender,
        summary=f"event {minutes}",
        body=body,
    )


async def test_each_record_is_one_json_line_in_its_utc_days_file(store: MemoryBackend) -> None:
    log = InteractionLog(store)
    assert await log.record(event(0)) and await log.record(event(60 * 15))  # 01:00Z the next day
    first_day = (await store.read_text(interaction_key(T0.date())) or "").splitlines()
    next_day = (
        await store.read_text(interaction_key((T0 + timedelta(days=1)).date())) or ""
    ).splitlines()
    assert len(first_day) == 1 and len(next_day) == 1
    assert json.loads(first_day[0])["message_id"] == "m0"


async def test_appends_from_many_replicas_lose_no_line(store: MemoryBackend) -> None:
    logs = [InteractionLog(store) for _ in range(4)]
    await asyncio.gather(*(logs[n % 4].record(event(n)) for n in range(40)))
    assert len((await store.read_text(interaction_key(T0.date())) or "").splitlines()) == 40


async def test_reads_filter_by_chat_sender_direction_action_and_time(
    store: MemoryBackend, clock: FakeClock
) -> None:
    log = InteractionLog(store, clock=clock)
    for record in (
        event(1),
        event(2, sender="bo"),
        event(3, direction=Direction.OUT, action=Action.SENT.value),
        event(4, chat="chat-2"),
        event(5),
    ):
        await log.record(record)
    clock.advance(hours=1)

    async def ids(**query: object) -> list[str | None]:
        return [r.message_id for r in (await log.read(InteractionQuery(**query))).records]  # type: ignore[arg-type]

    assert await ids(chat_id="chat-1", sender="ana", direction=Direction.IN) == ["m1", "m5"]
    assert await ids(action="sent") == ["m3"]
    assert await ids(since=T0 + timedelta(minutes=4)) == ["m4", "m5"]
    assert await ids(limit=2) == ["m4", "m5"]
    assert await ids(until=T0 + timedelta(minutes=2)) == ["m1"]


async def test_a_query_spans_several_day_files(store: MemoryBackend, clock: FakeClock) -> None:
    log = InteractionLog(store, clock=clock)
    await log.record(event(-60 * 24))
    await log.record(event(0))
    read = await log.read(InteractionQuery(since=T0 - timedelta(days=2)))
    assert [r.message_id for r in read.records] == [f"m{-60 * 24}", "m0"]


async def test_a_torn_line_is_skipped_and_counted(store: MemoryBackend, clock: FakeClock) -> None:
    log = InteractionLog(store, clock=clock)
    await log.record(event(1))
    await store.append_text(interaction_key(T0.date()), '{"ts": "2026-11-29T10:0')
    await store.append_text(interaction_key(T0.date()), "\n")
    await log.record(event(2))
    read = await log.read()
    assert [r.message_id for r in read.records] == ["m1", "m2"] and read.skipped_lines == 1


async def test_an_unreadable_day_is_reported_not_taken_as_empty(
    store: MemoryBackend, clock: FakeClock
) -> None:
    await InteractionLog(store).record(event(1))
    faulty = FaultyBackend(store)
    faulty.add(FaultRule(Fault.READ_FAILS))
    read = await InteractionLog(faulty, clock=clock).read()
    assert read.records == () and read.unresolved_days == (T0.date(),)


async def test_the_body_is_stored_in_the_log_file_but_never_in_a_log_line(
    store: MemoryBackend, caplog: pytest.LogCaptureFixture
) -> None:
    secret_body = "please wire 10k to account 12345"
    faulty = FaultyBackend(store)
    faulty.add(FaultRule(Fault.WRITE_FAILS, times=1))
    log = InteractionLog(faulty)
    with caplog.at_level(logging.DEBUG):
        assert not await log.record(event(1, body=secret_body))
        assert await log.record(event(2, body=secret_body))
    assert secret_body in (await store.read_text(interaction_key(T0.date())) or "")
    assert secret_body not in caplog.text and secret_body not in repr(event(1, body=secret_body))


async def test_a_query_over_too_many_days_is_refused(
    store: MemoryBackend, clock: FakeClock
) -> None:
    with pytest.raises(ValueError, match="at most"):
        await InteractionLog(store, clock=clock).read(
            InteractionQuery(since=T0 - timedelta(days=400))
        )

"""The daily summary: the 17:00 UTC−7 day, its counts, its page, and producing it once per fleet."""

from __future__ import annotations

import asyncio
import json
from datetime import date, datetime, timedelta, timezone

from service.ledger.memory.interactions import Channel, Direction, Interaction, InteractionLog
from service.ledger.memory.promises import Promise, PromiseLedger, PromiseStatus
from service.ledger.summary.claim import summary_keys
from service.ledger.summary.daily import (
    SUMMARY_OFFSET,
    build_summary,
    day_window,
    render_html,
    summary_due,
)
from service.ledger.summary.first_boot import FIRST_BOOT_KEY
from service.ledger.summary.production import DailySummaryProducer, SummaryOutcome
from service.storage.backend import MemoryBackend
from service.storage.faults import Fault, FaultRule, FaultyBackend
from service.telemetry.metrics import LedgerMetrics
from tests.ledger.ledger_helpers import FakeClock, RecordingBackend

DAY = date(2026, 11, 28)
START = datetime(2026, 11, 28, tzinfo=timezone.utc)


def local(hour: int, minute: int = 0, *, day: date = DAY) -> datetime:
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=SUMMARY_OFFSET)


def event(
    hours: float, *, direction: Direction = Direction.IN, chat: str = "chat-1", sender: str = "ana"
) -> Interaction:
    return Interaction(
        ts=START + timedelta(hours=hours),
        direction=direction,
        channel=Channel.CHAT,
        action="received",
        chat_id=chat,
        sender=sender,
    )


# --- the day ---


def test_the_day_ending_at_17_utc_minus_7_is_exactly_the_utc_calendar_day() -> None:
    start, end = day_window(DAY)
    assert (start, end) == (START, START + timedelta(days=1))
    assert (start, end) == (local(17, day=date(2026, 11, 27)), local(17))


def test_the_summary_is_due_from_17_00_utc_minus_7_for_the_catch_up_window() -> None:
    assert summary_due(local(16, 59)) is None
    assert summary_due(local(17, 0)) == DAY
    assert summary_due(local(4, 59, day=DAY + timedelta(days=1))) == DAY
    assert summary_due(local(5, 0, day=DAY + timedelta(days=1))) is None


# --- counts and page ---


def test_counts_cover_only_the_days_window() -> None:
    records = [
        event(1),
        event(2, sender="bo"),
        event(3, direction=Direction.OUT, sender="agent"),
        event(4, chat="chat-2"),
        event(-1),
        event(24),
    ]
    promises = [
        Promise("p1", "made today", START + timedelta(hours=5)),
        Promise(
            "p2",
            "resolved today",
            START - timedelta(days=2),
            PromiseStatus.RESOLVED,
            resolved_at=START + timedelta(hours=6),
        ),
        Promise("p3", "made tomorrow", START + timedelta(days=1, hours=1)),
    ]
    summary = build_summary(DAY, records, promises)
    assert summary.total == 4
    assert summary.by_direction == {"in": 3, "out": 1}
    assert summary.by_chat == {"chat-1": 3, "chat-2": 1}
    assert summary.by_sender == {"ana": 2, "bo": 1}
    assert (summary.promises_made, summary.promises_resolved, summary.promises_open) == (1, 1, 1)


def test_the_page_escapes_everything_it_shows() -> None:
    page = render_html(
        build_summary(DAY, [event(1, chat="<script>alert(1)</script>", sender='"><img src=x>')])
    )
    assert "<script>alert" not in page and "<img" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


# --- once per fleet ---


async def fill_log(store: MemoryBackend) -> None:
    log = InteractionLog(store)
    for n in range(3):
        await log.record(event(n + 1))


async def test_two_replicas_produce_the_summary_once(store: MemoryBackend) -> None:
    await fill_log(store)
    clock = FakeClock(local(9))
    producers = [
        DailySummaryProducer(store, InteractionLog(store), clock=clock, metrics=LedgerMetrics())
        for _ in range(2)
    ]
    assert await producers[0].run_if_due() is SummaryOutcome.NOT_DUE  # the fleet boots that morning
    clock.now = local(17, 5)
    outcomes = sorted(o.value for o in await asyncio.gather(*(p.run_if_due() for p in producers)))
    assert outcomes.count(SummaryOutcome.PRODUCED.value) == 1
    json_key, html_key = summary_keys(DAY)
    claim = json.loads(await store.read_text(json_key) or "")
    assert claim["state"] == "done" and claim["counts"]["total"] == 3
    assert "Daily summary 2026-11-28" in (await store.read_text(html_key) or "")
    assert await producers[0].run_if_due() is SummaryOutcome.ALREADY_DONE


async def test_a_loser_writes_nothing(store: MemoryBackend) -> None:
    clock = FakeClock(local(17, 5))
    assert (
        await DailySummaryProducer(
            store, InteractionLog(store), clock=clock, metrics=LedgerMetrics()
        ).produce(DAY)
        is SummaryOutcome.PRODUCED
    )
    recording = RecordingBackend(store)
    late = DailySummaryProducer(
        recording, InteractionLog(recording), clock=clock, metrics=LedgerMetrics()
    )
    assert await late.produce(DAY) is SummaryOutcome.ALREADY_DONE and recording.writes == []


async def test_a_crash_between_claim_and_page_is_recovered_after_the_lease(
    store: MemoryBackend,
) -> None:
    await fill_log(store)
    clock = FakeClock(local(17, 5))
    json_key, html_key = summary_keys(DAY)
    crashing = FaultyBackend(store)
    crashing.add(FaultRule(Fault.WRITE_FAILS, key=html_key))
    first = DailySummaryProducer(
        crashing, InteractionLog(crashing), clock=clock, metrics=LedgerMetrics()
    )
    assert await first.produce(DAY) is SummaryOutcome.UNRESOLVED
    assert json.loads(await store.read_text(json_key) or "")["state"] == "claimed"
    other = DailySummaryProducer(store, InteractionLog(store), clock=clock, metrics=LedgerMetrics())
    assert await other.produce(DAY) is SummaryOutcome.IN_PROGRESS  # the claim is still fresh
    clock.advance(minutes=11)
    assert await other.produce(DAY) is SummaryOutcome.RECOVERED
    assert json.loads(await store.read_text(json_key) or "")["state"] == "done"
    assert await store.exists(html_key)


async def test_a_page_left_by_a_crashed_owner_is_kept_and_the_day_is_marked_done(
    store: MemoryBackend,
) -> None:
    clock = FakeClock(local(17, 5))
    json_key, html_key = summary_keys(DAY)
    crashing = FaultyBackend(store)
    crashing.add(
        FaultRule(Fault.WRITE_FAILS, key=json_key, skip=1)
    )  # the claim lands; "done" never does
    assert await DailySummaryProducer(
        crashing, InteractionLog(crashing), clock=clock, metrics=LedgerMetrics()
    ).produce(DAY) is (SummaryOutcome.UNRESOLVED)
    page = await store.read_text(html_key)
    clock.advance(minutes=11)
    recovering = DailySummaryProducer(
        store, InteractionLog(store), clock=clock, metrics=LedgerMetrics()
    )
    assert await recovering.produce(DAY) is SummaryOutcome.RECOVERED
    assert await store.read_text(html_key) == page
    assert json.loads(await store.read_text(json_key) or "")["state"] == "done"


async def test_an_unreadable_log_claims_nothing(store: MemoryBackend) -> None:
    await fill_log(store)
    faulty = FaultyBackend(store)
    faulty.add(FaultRule(Fault.READ_FAILS, key="interactions/*"))
    producer = DailySummaryProducer(
        faulty, InteractionLog(faulty), clock=FakeClock(local(17, 5)), metrics=LedgerMetrics()
    )
    assert await producer.produce(DAY) is SummaryOutcome.UNRESOLVED
    assert not await store.exists(summary_keys(DAY)[0])


async def test_promise_counts_come_from_the_promises_ledger(store: MemoryBackend) -> None:
    clock = FakeClock(START + timedelta(hours=2))
    promises = PromiseLedger(store, clock=clock, metrics=LedgerMetrics())
    await promises.add("call back")
    clock.now = local(17, 1)
    producer = DailySummaryProducer(
        store, InteractionLog(store), promises=promises, clock=clock, metrics=LedgerMetrics()
    )
    clock.now = local(9)
    assert await producer.run_if_due() is SummaryOutcome.NOT_DUE  # the fleet's first boot
    clock.now = local(17, 1)
    assert await producer.run_if_due() is SummaryOutcome.PRODUCED
    claim = json.loads(await store.read_text(summary_keys(DAY)[0]) or "")
    assert claim["counts"]["promises_made"] == 1


async def test_nothing_is_produced_outside_the_due_window(store: MemoryBackend) -> None:
    recording = RecordingBackend(store)
    producer = DailySummaryProducer(
        recording, InteractionLog(recording), clock=FakeClock(local(12, 0)), metrics=LedgerMetrics()
    )
    assert await producer.run_if_due() is SummaryOutcome.NOT_DUE
    assert [w.key for w in recording.writes] == [FIRST_BOOT_KEY]  # the first boot, no summary

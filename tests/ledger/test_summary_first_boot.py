"""No daily summary for a day that ended before the container's first boot (issue 36, item 6): a fresh
container's first evening mailed the sponsors an empty summary of a day the fleet never saw. The mailer is
the fake Sent Items of test_summary_mailing; the clock is the summary tests' fake clock."""

from __future__ import annotations

import asyncio
import json
from datetime import date, datetime, timedelta

from service.ledger.memory.interactions import InteractionLog
from service.ledger.summary.claim import summary_keys
from service.ledger.summary.daily import SUMMARY_OFFSET
from service.ledger.summary.first_boot import FIRST_BOOT_KEY
from service.ledger.summary.production import DailySummaryProducer, SummaryOutcome
from service.storage.backend import MemoryBackend
from service.storage.faults import Fault, FaultRule, FaultyBackend
from service.telemetry.metrics import LedgerMetrics
from tests.ledger.ledger_helpers import FakeClock
from tests.ledger.test_summary_mailing import SentItems

DAY = date(2026, 11, 28)


def at(hour: int, *, day: date = DAY) -> FakeClock:
    return FakeClock(datetime(day.year, day.month, day.day, hour, tzinfo=SUMMARY_OFFSET))


def producer(store: MemoryBackend, mailer: SentItems, clock: FakeClock) -> DailySummaryProducer:
    return DailySummaryProducer(
        store,
        InteractionLog(store, clock=clock),
        mailer=mailer,
        clock=clock,
        metrics=LedgerMetrics(),
    )


async def test_a_fresh_container_at_18_00_utc_minus_7_mails_no_summary(
    store: MemoryBackend,
) -> None:
    mailer, clock = SentItems(), at(18)
    assert await producer(store, mailer, clock).run_if_due() is SummaryOutcome.BEFORE_FIRST_BOOT
    assert mailer.sent == [] and await store.list("summaries/") == []
    clock.advance(hours=1)  # the loop's later runs that evening, on any replica, skip it too
    assert await producer(store, mailer, clock).run_if_due() is SummaryOutcome.BEFORE_FIRST_BOOT
    clock.advance(
        days=1
    )  # the next evening: a day the fleet lived through is summarized and mailed
    assert await producer(store, mailer, clock).run_if_due() is SummaryOutcome.PRODUCED
    assert [letter.day for letter in mailer.sent] == [DAY + timedelta(days=1)]


async def test_a_container_that_booted_before_the_day_ended_mails_its_summary(
    store: MemoryBackend,
) -> None:
    mailer, clock = SentItems(), at(16)  # an hour before the day ends
    assert await producer(store, mailer, clock).run_if_due() is SummaryOutcome.NOT_DUE
    clock.advance(hours=2)
    assert await producer(store, mailer, clock).run_if_due() is SummaryOutcome.PRODUCED
    assert [letter.day for letter in mailer.sent] == [DAY]


async def test_an_asked_summary_of_a_day_before_the_first_boot_is_refused(
    store: MemoryBackend,
) -> None:
    mailer, clock = SentItems(), at(18)
    await producer(store, mailer, clock).run_if_due()
    earlier = DAY - timedelta(days=3)
    assert await producer(store, mailer, clock).produce(earlier) is SummaryOutcome.BEFORE_FIRST_BOOT
    assert mailer.sent == [] and not await store.exists(summary_keys(earlier)[0])


async def test_racing_replicas_record_one_first_boot(store: MemoryBackend) -> None:
    mailer, clock = SentItems(), at(18)
    racers = [producer(store, mailer, clock) for _ in range(4)]
    outcomes = await asyncio.gather(*(p.run_if_due() for p in racers))
    assert set(outcomes) == {SummaryOutcome.BEFORE_FIRST_BOOT} and mailer.sent == []
    boot = json.loads(await store.read_text(FIRST_BOOT_KEY) or "{}")
    assert boot["first_boot"].startswith("2026-11-29T01:00:00")  # 18:00 UTC−7 is 01:00Z


async def test_a_container_older_than_the_record_keeps_its_summaries(store: MemoryBackend) -> None:
    mailer, clock = SentItems(), at(18, day=DAY - timedelta(days=5))
    # Produced by an older release, before the first-boot record existed.
    assert await producer(store, mailer, clock).produce(DAY - timedelta(days=5)) is (
        SummaryOutcome.PRODUCED
    )
    mailer.sent.clear()
    clock.now = at(18).now  # upgraded and restarted the evening of DAY
    assert await producer(store, mailer, clock).run_if_due() is SummaryOutcome.PRODUCED
    assert [letter.day for letter in mailer.sent] == [DAY]


async def test_an_unreadable_first_boot_produces_nothing(store: MemoryBackend) -> None:
    mailer, clock = SentItems(), at(18)
    faulty = FaultyBackend(store)
    faulty.add(FaultRule(Fault.READ_FAILS, key=FIRST_BOOT_KEY))
    assert await producer(faulty, mailer, clock).run_if_due() is SummaryOutcome.UNRESOLVED
    assert mailer.sent == [] and await store.list("summaries/") == []

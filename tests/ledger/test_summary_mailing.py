"""The daily summary's mail: claimed → mailing → mailed, once per fleet, through crashes, takeovers and
lost answers. The mailer here is a fake Sent Items (a list) that can lose what it sends; the real one,
over the Graph emulator, is tests/tools/test_summary_to_sponsors.py."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from service.ledger.memory.interactions import InteractionLog, InteractionQuery
from service.ledger.summary.claim import SummaryState, summary_keys
from service.ledger.summary.daily import SUMMARY_OFFSET
from service.ledger.summary.mailing import LetterRefused, LetterSent, LetterUnknown, SummaryLetter
from service.ledger.summary.production import DailySummaryProducer, SummaryOutcome
from service.storage.backend import MemoryBackend
from service.storage.faults import Fault, FaultRule, FaultyBackend
from service.telemetry.metrics import LedgerMetrics
from tests.ledger.ledger_helpers import FakeClock

DAY = date(2026, 11, 28)
SPONSORS = ("ada@contoso.com", "grace@contoso.com")


def evening() -> FakeClock:
    return FakeClock(datetime(2026, 11, 28, 17, 5, tzinfo=SUMMARY_OFFSET))


@dataclass
class SentItems:
    """A fake mailbox's Sent Items: what was sent, by send id; sends may fail before or after they land."""

    sponsors: tuple[str, ...] | None = SPONSORS
    sent: list[SummaryLetter] = field(default_factory=list)
    finds: int = 0
    lose_answers: int = 0  # the next n sends land, then raise as if the answer were lost
    refuse: int = 0  # the next n sends are refused before they land
    unreadable: bool = False  # looking in Sent Items cannot tell

    def recipients(self) -> tuple[str, ...] | None:
        return self.sponsors

    async def find(self, letter: SummaryLetter, since: datetime) -> str | None:
        self.finds += 1
        if self.unreadable:
            raise LetterUnknown(letter.send_id)
        return next(
            (f"sent-{n}" for n, s in enumerate(self.sent) if s.send_id == letter.send_id), None
        )

    async def send(self, letter: SummaryLetter) -> LetterSent:
        if self.refuse:
            self.refuse -= 1
            raise LetterRefused("refused")
        self.sent.append(letter)
        if self.lose_answers:
            self.lose_answers -= 1
            raise LetterUnknown(letter.send_id)
        return LetterSent("sent", f"sent-{len(self.sent) - 1}")


def producer(
    store: MemoryBackend, mailer: SentItems | None, clock: FakeClock
) -> DailySummaryProducer:
    return DailySummaryProducer(
        store,
        InteractionLog(store, clock=clock),
        mailer=mailer,
        clock=clock,
        metrics=LedgerMetrics(),
    )


async def stored(store: MemoryBackend) -> dict[str, Any]:
    return json.loads(await store.read_text(summary_keys(DAY)[0]) or "{}")


async def test_the_owner_mails_the_sponsors_once_and_records_it(store: MemoryBackend) -> None:
    mailer, clock = SentItems(), evening()
    assert await producer(store, mailer, clock).produce(DAY) is SummaryOutcome.PRODUCED
    (letter,) = mailer.sent
    claim = await stored(store)
    assert claim["state"] == SummaryState.MAILED.value and claim["recipients"] == list(SPONSORS)
    assert (claim["send_id"], claim["subject"], claim["mail_outcome"]) == (
        letter.send_id,
        letter.subject,
        "sent",
    )
    assert letter.to == SPONSORS and letter.subject.startswith(
        "Daily summary 2026-11-28: 0 need you"
    )
    assert "<h2>Needs you</h2>" in letter.html and mailer.finds == 0
    records = (
        await InteractionLog(store, clock=clock).read(InteractionQuery(since=clock.now))
    ).records
    assert [(r.action, r.channel.value, r.message_id) for r in records] == [
        ("summary_mailed", "email", "sent-0")
    ]
    assert (
        await producer(store, mailer, clock).produce(DAY) is SummaryOutcome.ALREADY_DONE
        and len(mailer.sent) == 1
    )


async def test_sponsors_not_known_yet_claim_nothing_until_they_are(store: MemoryBackend) -> None:
    mailer, clock = SentItems(sponsors=None), evening()
    assert await producer(store, mailer, clock).produce(DAY) is SummaryOutcome.UNRESOLVED
    assert await store.list("summaries/") == [] and mailer.sent == []
    mailer.sponsors = SPONSORS
    assert (
        await producer(store, mailer, clock).produce(DAY) is SummaryOutcome.PRODUCED
        and len(mailer.sent) == 1
    )


async def test_with_nobody_to_mail_the_day_is_done_unmailed(store: MemoryBackend) -> None:
    mailer = SentItems(sponsors=())
    assert await producer(store, mailer, evening()).produce(DAY) is SummaryOutcome.PRODUCED
    assert (await stored(store))["state"] == SummaryState.DONE.value and mailer.sent == []


async def test_a_crash_after_the_mail_went_out_is_found_in_sent_items_and_not_sent_again(
    store: MemoryBackend,
) -> None:
    mailer, clock = SentItems(), evening()
    crashing = FaultyBackend(store)
    # The claim and the move to mailing land; the move to mailed never does (the owner died there).
    crashing.add(FaultRule(Fault.WRITE_FAILS, key=summary_keys(DAY)[0], skip=2))
    assert await producer(crashing, mailer, clock).produce(DAY) is SummaryOutcome.UNRESOLVED
    assert len(mailer.sent) == 1 and (await stored(store))["state"] == SummaryState.MAILING.value
    assert (
        await producer(store, mailer, clock).produce(DAY) is SummaryOutcome.IN_PROGRESS
    )  # still its lease
    clock.advance(minutes=11)
    assert await producer(store, mailer, clock).produce(DAY) is SummaryOutcome.RECOVERED
    claim = await stored(store)
    assert (
        claim["state"] == SummaryState.MAILED.value and claim["mail_outcome"] == "found_on_takeover"
    )
    assert len(mailer.sent) == 1 and mailer.finds == 1


async def test_a_mail_whose_send_failed_is_sent_by_the_taker_once_sent_items_shows_it_is_not_there(
    store: MemoryBackend,
) -> None:
    mailer, clock = SentItems(refuse=1), evening()
    assert await producer(store, mailer, clock).produce(DAY) is SummaryOutcome.UNRESOLVED
    assert mailer.sent == [] and (await stored(store))["state"] == SummaryState.MAILING.value
    clock.advance(minutes=11)
    assert await producer(store, mailer, clock).produce(DAY) is SummaryOutcome.RECOVERED
    assert len(mailer.sent) == 1 and mailer.finds == 1
    assert (await stored(store))["mail_outcome"] == "sent"


async def test_a_send_nobody_could_settle_is_found_by_the_taker(store: MemoryBackend) -> None:
    mailer, clock = SentItems(lose_answers=1), evening()
    assert await producer(store, mailer, clock).produce(DAY) is SummaryOutcome.UNRESOLVED
    clock.advance(minutes=11)
    assert await producer(store, mailer, clock).produce(DAY) is SummaryOutcome.RECOVERED
    assert len(mailer.sent) == 1 and (await stored(store))["mail_outcome"] == "found_on_takeover"


async def test_a_taker_that_cannot_read_sent_items_sends_nothing(store: MemoryBackend) -> None:
    mailer, clock = SentItems(refuse=1), evening()
    await producer(store, mailer, clock).produce(DAY)
    clock.advance(minutes=11)
    mailer.unreadable = True
    assert await producer(store, mailer, clock).produce(DAY) is SummaryOutcome.UNRESOLVED
    assert mailer.sent == []
    mailer.unreadable = False
    clock.advance(minutes=11)
    assert (
        await producer(store, mailer, clock).produce(DAY) is SummaryOutcome.RECOVERED
        and len(mailer.sent) == 1
    )


async def test_a_takeover_keeps_the_send_id_the_stale_owner_would_have_used(
    store: MemoryBackend,
) -> None:
    mailer, clock = SentItems(), evening()
    crashing = FaultyBackend(store)
    crashing.add(FaultRule(Fault.WRITE_FAILS, key=summary_keys(DAY)[1]))  # dies before the page
    assert await producer(crashing, mailer, clock).produce(DAY) is SummaryOutcome.UNRESOLVED
    first = await stored(store)
    assert first["state"] == SummaryState.CLAIMED.value
    clock.advance(minutes=11)
    assert await producer(store, mailer, clock).produce(DAY) is SummaryOutcome.RECOVERED
    assert [s.send_id for s in mailer.sent] == [first["send_id"]] and (await stored(store))[
        "owner"
    ] != first["owner"]


class HeldMailingMove:
    """Holds the owner's move to mailing (the write that would let it send) until released."""

    def __init__(self, inner: MemoryBackend) -> None:
        self.inner = inner
        self.reached = asyncio.Event()
        self.release = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def write_text(
        self, key: str, content: str, *, if_match: str | None = None, if_absent: bool = False
    ) -> str:
        if (
            key == summary_keys(DAY)[0]
            and '"state": "mailing"' in content
            and not self.release.is_set()
        ):
            self.reached.set()
            await self.release.wait()
        return await self.inner.write_text(key, content, if_match=if_match, if_absent=if_absent)


async def test_an_owner_that_wakes_after_a_takeover_sends_nothing(store: MemoryBackend) -> None:
    mailer, clock = SentItems(), evening()
    held = HeldMailingMove(store)
    slow = asyncio.create_task(producer(held, mailer, clock).produce(DAY))
    await asyncio.wait_for(held.reached.wait(), 10)
    clock.advance(minutes=11)  # the slow owner's claim is stale now
    assert await producer(store, mailer, clock).produce(DAY) is SummaryOutcome.RECOVERED
    held.release.set()
    assert await asyncio.wait_for(slow, 10) is SummaryOutcome.UNRESOLVED
    assert len(mailer.sent) == 1 and (await stored(store))["state"] == SummaryState.MAILED.value


async def test_racing_producers_mail_once(store: MemoryBackend) -> None:
    mailer, clock = SentItems(), evening()
    clock.advance(hours=-8)  # the fleet booted that morning
    assert await producer(store, mailer, clock).run_if_due() is SummaryOutcome.NOT_DUE
    clock.advance(hours=8)
    outcomes = await asyncio.gather(
        *(producer(store, mailer, clock).run_if_due() for _ in range(4))
    )
    assert sorted(o.value for o in outcomes).count(SummaryOutcome.PRODUCED.value) == 1
    assert len(mailer.sent) == 1

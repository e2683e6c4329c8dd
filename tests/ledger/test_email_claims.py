"""The email claim → settle → hold protocol against a real store, with injected faults.

A counting fake mailbox stands in for Graph, so "no Graph call while holding" is a count.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime, timedelta
from itertools import count

import pytest

from service.ledger.claims.email_claims import (
    CursorStart,
    EmailClaimer,
    EmailCycleOutcome,
    EmailState,
)
from service.ledger.claims.email_cursor import (
    EMAIL_CURSOR_KEY,
    LEGACY_EMAIL_CURSOR_KEY,
    EmailCursor,
    parse_email_cursor,
    render_email_cursor,
)
from service.ledger.claims.settle import Settlement
from service.storage.backend import MemoryBackend
from service.storage.faults import Fault, FaultRule, FaultyBackend
from service.telemetry.metrics import LedgerMetrics, Metrics
from tests.ledger.ledger_helpers import (
    T0,
    CancelledAfterCommit,
    CountingMailbox,
    FakeClock,
    Mail,
    RecordingBackend,
    mail,
    sample,
)


async def seed_cursor(store: MemoryBackend, at: datetime = T0, *claim_ids: str) -> None:
    await store.write_text(EMAIL_CURSOR_KEY, render_email_cursor(EmailCursor(at, claim_ids)))


async def stored(store: MemoryBackend) -> EmailCursor:
    return parse_email_cursor(await store.read_text(EMAIL_CURSOR_KEY) or "")


def claimer(backend: MemoryBackend, **kwargs: object) -> EmailClaimer[Mail]:
    kwargs.setdefault("is_cloud", True)
    kwargs.setdefault("metrics", LedgerMetrics())
    return EmailClaimer(backend, **kwargs)  # type: ignore[arg-type]


def hold_after_write(
    fault: Fault = Fault.WRITE_RESPONSE_LOST, *, reads: int = 3
) -> tuple[FaultRule, ...]:
    """The cycle's cursor read succeeds, its claim write hits ``fault``, and the next ``reads`` reads fail."""
    return (FaultRule(fault, times=1), FaultRule(Fault.READ_FAILS, skip=1, times=reads))


# --- reading the cursor ---


async def test_an_unreadable_email_cursor_skips_the_cycle(store: MemoryBackend) -> None:
    await seed_cursor(store)
    recording = RecordingBackend(store)
    faulty = FaultyBackend(recording)
    faulty.add(FaultRule(Fault.READ_FAILS, times=1))
    mailbox = CountingMailbox([mail(1)])
    cycle = await claimer(faulty).run_cycle(mailbox.fetch)
    assert cycle.outcome is EmailCycleOutcome.SKIPPED_UNREADABLE and cycle.deliver == ()
    assert mailbox.calls == 0 and recording.writes == []


async def test_an_unreadable_cursor_is_never_initialized(store: MemoryBackend) -> None:
    faulty = FaultyBackend(store)
    faulty.add(FaultRule(Fault.READ_FAILS, times=1))
    cycle = await claimer(faulty).run_cycle(CountingMailbox().fetch)
    assert cycle.outcome is EmailCycleOutcome.SKIPPED_UNREADABLE
    assert not await store.exists(EMAIL_CURSOR_KEY)


async def test_a_missing_cursor_starts_at_now_on_a_cloud_backend_and_ignores_the_legacy_key(
    store: MemoryBackend, clock: FakeClock
) -> None:
    await store.write_text(
        LEGACY_EMAIL_CURSOR_KEY, render_email_cursor(EmailCursor(T0 - timedelta(days=30)))
    )
    mailbox = CountingMailbox([mail(-100), mail(5)])
    email = claimer(store, is_cloud=True, clock=clock)
    first = await email.run_cycle(mailbox.fetch)
    assert first.outcome is EmailCycleOutcome.INITIALIZED and mailbox.calls == 0
    assert await stored(store) == EmailCursor(clock())
    second = await email.run_cycle(mailbox.fetch)
    assert second.deliver == (mail(5),)  # mail from before "now" is never pushed


async def test_a_local_backend_adopts_the_legacy_cursor_once_and_leaves_it_in_place(
    store: MemoryBackend, clock: FakeClock
) -> None:
    legacy = render_email_cursor(EmailCursor(T0 - timedelta(hours=1)))
    await store.write_text(LEGACY_EMAIL_CURSOR_KEY, legacy)
    email = claimer(store, is_cloud=False, clock=clock)
    assert (await email.run_cycle(CountingMailbox().fetch)).outcome is EmailCycleOutcome.INITIALIZED
    assert (await stored(store)).ts == T0 - timedelta(hours=1)
    assert await store.read_text(LEGACY_EMAIL_CURSOR_KEY) == legacy
    await store.write_text(
        LEGACY_EMAIL_CURSOR_KEY, render_email_cursor(EmailCursor(T0 - timedelta(days=9)))
    )
    cycle = await email.run_cycle(CountingMailbox([mail(-3600 + 1)]).fetch)
    assert cycle.deliver == (mail(-3600 + 1),)
    assert (await stored(store)).ts == mail(-3600 + 1).received_at  # not re-adopted


async def test_a_local_backend_without_a_usable_legacy_cursor_starts_at_now(
    store: MemoryBackend, clock: FakeClock
) -> None:
    await store.write_text(LEGACY_EMAIL_CURSOR_KEY, "garbage\n")
    assert (
        await claimer(store, is_cloud=False, clock=clock).run_cycle(CountingMailbox().fetch)
    ).outcome is (EmailCycleOutcome.INITIALIZED)
    assert (await stored(store)).ts == clock()


async def test_an_unreadable_legacy_cursor_skips_the_cycle_rather_than_leave_a_gap(
    store: MemoryBackend,
) -> None:
    faulty = FaultyBackend(store)
    faulty.add(FaultRule(Fault.READ_FAILS, key=LEGACY_EMAIL_CURSOR_KEY, times=1))
    cycle = await claimer(faulty, is_cloud=False).run_cycle(CountingMailbox().fetch)
    assert cycle.outcome is EmailCycleOutcome.SKIPPED_UNREADABLE and not await store.exists(
        EMAIL_CURSOR_KEY
    )


class SiblingCreatesFirst:
    """Another replica creates the cursor between our read and our create."""

    def __init__(self, inner: MemoryBackend) -> None:
        self.inner = inner

    def __getattr__(self, name: str):  # noqa: ANN204 - forwards the rest of the protocol
        return getattr(self.inner, name)

    async def write_text(
        self, key: str, content: str, *, if_match: str | None = None, if_absent: bool = False
    ) -> str:
        if if_absent and not await self.inner.exists(key):
            sibling = render_email_cursor(EmailCursor(T0 - timedelta(minutes=1)))
            await self.inner.write_text(key, sibling, if_absent=True)
        return await self.inner.write_text(key, content, if_match=if_match, if_absent=if_absent)


async def test_a_cursor_created_by_another_replica_first_is_kept(store: MemoryBackend) -> None:
    cycle = await claimer(SiblingCreatesFirst(store)).run_cycle(CountingMailbox().fetch)
    assert cycle.outcome is EmailCycleOutcome.INIT_LOST
    assert (await stored(store)).ts == T0 - timedelta(minutes=1)


# --- starting the cursor before any host (no mailbox call, no claim) ---


async def test_starting_creates_a_missing_cursor_at_now_and_asks_no_mailbox(
    store: MemoryBackend, clock: FakeClock
) -> None:
    email = claimer(store, clock=clock)
    assert await email.start_cursor() is CursorStart.CREATED
    assert await stored(store) == EmailCursor(clock())
    clock.advance(minutes=10)  # the first host connects later: mail since the boot is new
    mailbox = CountingMailbox([mail(5)])
    assert (await email.run_cycle(mailbox.fetch)).deliver == (mail(5),)


async def test_starting_leaves_a_present_cursor_alone(
    store: MemoryBackend, clock: FakeClock
) -> None:
    await seed_cursor(store, T0 - timedelta(days=2), "claim-1")
    recording = RecordingBackend(store)
    assert await claimer(recording, clock=clock).start_cursor() is CursorStart.PRESENT
    assert recording.writes == [] and await stored(store) == EmailCursor(
        T0 - timedelta(days=2), ("claim-1",)
    )


async def test_starting_over_an_unreadable_cursor_writes_nothing_and_is_tried_again(
    store: MemoryBackend,
) -> None:
    faulty = FaultyBackend(store)
    faulty.add(FaultRule(Fault.READ_FAILS, times=1))
    assert await claimer(faulty).start_cursor() is CursorStart.UNKNOWN
    assert not await store.exists(EMAIL_CURSOR_KEY)
    assert await claimer(faulty).start_cursor() is CursorStart.CREATED


async def test_starting_on_a_local_backend_adopts_the_legacy_cursor(
    store: MemoryBackend, clock: FakeClock
) -> None:
    await store.write_text(
        LEGACY_EMAIL_CURSOR_KEY, render_email_cursor(EmailCursor(T0 - timedelta(hours=1)))
    )
    assert await claimer(store, is_cloud=False, clock=clock).start_cursor() is CursorStart.CREATED
    assert (await stored(store)).ts == T0 - timedelta(hours=1)


async def test_starting_when_another_replica_created_it_first_keeps_theirs(
    store: MemoryBackend,
) -> None:
    assert await claimer(SiblingCreatesFirst(store)).start_cursor() is CursorStart.PRESENT
    assert (await stored(store)).ts == T0 - timedelta(minutes=1)


# --- claiming ---


async def test_the_claim_advances_the_cursor_before_the_batch_is_handed_out(
    store: MemoryBackend,
) -> None:
    await seed_cursor(store, T0, "older")
    ids = count(1)
    email = claimer(store, new_claim_id=lambda: f"claim-{next(ids)}")
    cycle = await email.run_cycle(CountingMailbox([mail(1), mail(2), mail(3)]).fetch)
    assert cycle.outcome is EmailCycleOutcome.CLAIMED and cycle.deliver == (
        mail(1),
        mail(2),
        mail(3),
    )
    assert await stored(store) == EmailCursor(mail(3).received_at, ("claim-1", "older"))


async def test_nothing_newer_than_the_cursor_is_nothing_new_without_a_write(
    store: MemoryBackend,
) -> None:
    await seed_cursor(store, mail(5).received_at)
    recording = RecordingBackend(store)
    cycle = await claimer(recording).run_cycle(CountingMailbox([mail(4), mail(5)]).fetch)
    assert (
        cycle.outcome is EmailCycleOutcome.NOTHING_NEW and cycle.fetched and recording.writes == []
    )


async def test_losing_the_race_drops_the_batch_and_a_later_cycle_fetches_what_the_winner_missed(
    store: MemoryBackend,
) -> None:
    await seed_cursor(store)
    winner, loser = claimer(store), claimer(store)
    winner_box = CountingMailbox([mail(1), mail(2)])
    loser_box = CountingMailbox([mail(1), mail(2), mail(3), mail(4)])
    won: list[Sequence[Mail]] = []

    async def fetch_while_the_winner_claims(since: datetime) -> Sequence[Mail]:
        page = await loser_box.fetch(since)
        won.append(
            (await winner.run_cycle(winner_box.fetch)).deliver
        )  # lands between our read and write
        return page

    lost = await loser.run_cycle(fetch_while_the_winner_claims)
    assert lost.outcome is EmailCycleOutcome.LOST and lost.deliver == ()
    later = await loser.run_cycle(loser_box.fetch)
    assert won == [(mail(1), mail(2))] and later.deliver == (mail(3), mail(4))


async def test_the_cursor_keeps_the_last_32_claim_ids_newest_first(store: MemoryBackend) -> None:
    await seed_cursor(store)
    ids = count(1)
    email = claimer(store, new_claim_id=lambda: f"claim-{next(ids)}")
    for n in range(1, 35):
        await email.run_cycle(CountingMailbox([mail(n)]).fetch)
    assert (await stored(store)).claim_ids == tuple(f"claim-{n}" for n in range(34, 2, -1))


# --- uncertain writes: settle, hold ---


async def test_a_committed_claim_whose_response_was_lost_is_settled_as_ours_and_delivered_once(
    store: MemoryBackend,
) -> None:
    await seed_cursor(store)
    faulty = FaultyBackend(store)
    faulty.add(FaultRule(Fault.WRITE_RESPONSE_LOST, times=1))
    email = claimer(faulty)
    mailbox = CountingMailbox([mail(1), mail(2)])
    first = await email.run_cycle(mailbox.fetch)
    assert first.outcome is EmailCycleOutcome.CLAIMED and first.deliver == (mail(1), mail(2))
    assert (await email.run_cycle(mailbox.fetch)).deliver == ()


async def test_a_held_batch_is_delivered_once_the_store_recovers_and_not_before(
    store: MemoryBackend,
) -> None:
    await seed_cursor(store)
    faulty = FaultyBackend(store)
    faulty.add(FaultRule(Fault.WRITE_RESPONSE_LOST, times=1), FaultRule(Fault.READ_FAILS, skip=1))
    metrics = Metrics()
    email = claimer(faulty, metrics=metrics.ledger)
    mailbox = CountingMailbox([mail(1), mail(2)])
    first = await email.run_cycle(mailbox.fetch)
    assert (
        first.outcome is EmailCycleOutcome.HOLDING
        and first.deliver == ()
        and email.state is EmailState.HOLDING
    )
    assert sample(metrics, "entrabot_email_hold") == 1
    for _ in range(3):
        held = await email.run_cycle(mailbox.fetch)
        assert (
            held.outcome is EmailCycleOutcome.HOLDING
            and held.deliver == ()
            and held.settled is Settlement.UNKNOWN
        )
    assert mailbox.calls == 1  # no mailbox call while holding
    faulty.heal()
    mailbox.mails.append(mail(3))
    recovered = await email.run_cycle(mailbox.fetch)
    assert recovered.settled is Settlement.OURS
    assert recovered.deliver == (
        mail(1),
        mail(2),
        mail(3),
    )  # the held batch, then the cycle carried on
    email = email  # mypy keeps the narrowing of email.state above across run_cycle(); this drops it
    assert email.state is EmailState.IDLE and sample(metrics, "entrabot_email_hold") == 0
    assert (await email.run_cycle(mailbox.fetch)).deliver == ()
    assert sample(metrics, "entrabot_email_settle_total", outcome="ours") == 1


@pytest.mark.parametrize("failure", [TimeoutError("mailbox read timed out"), RuntimeError("a bug")])
async def test_a_held_batch_settled_as_ours_is_handed_out_whatever_the_rest_of_the_cycle_raises(
    store: MemoryBackend, failure: Exception
) -> None:
    await seed_cursor(store)
    faulty = FaultyBackend(store)
    faulty.add(*hold_after_write())
    email = claimer(faulty)
    assert (
        await email.run_cycle(CountingMailbox([mail(1), mail(2)]).fetch)
    ).outcome is EmailCycleOutcome.HOLDING

    async def failing_fetch(since: datetime) -> Sequence[Mail]:
        raise failure

    cycle = await email.run_cycle(failing_fetch)
    assert cycle.settled is Settlement.OURS and cycle.outcome is EmailCycleOutcome.FAILED
    assert cycle.deliver == (mail(1), mail(2)) and cycle.error is failure
    assert email.state is EmailState.IDLE
    assert (
        await email.run_cycle(CountingMailbox([mail(1), mail(2)]).fetch)
    ).deliver == ()  # not twice


async def test_a_held_claim_that_lost_is_dropped_and_the_cycle_carries_on(
    store: MemoryBackend,
) -> None:
    await seed_cursor(store)
    faulty = FaultyBackend(store)
    faulty.add(*hold_after_write(Fault.WRITE_FAILS))
    email = claimer(faulty)
    assert (await email.run_cycle(CountingMailbox([mail(1), mail(2), mail(3)]).fetch)).outcome is (
        EmailCycleOutcome.HOLDING
    )
    sibling = await claimer(store).run_cycle(CountingMailbox([mail(1), mail(2)]).fetch)
    assert sibling.deliver == (mail(1), mail(2))
    after = await email.run_cycle(CountingMailbox([mail(1), mail(2), mail(3)]).fetch)
    assert after.settled is Settlement.LOST and after.outcome is EmailCycleOutcome.CLAIMED
    assert after.deliver == (mail(3),)


async def test_while_holding_the_only_cursor_write_is_the_resend_of_that_same_claim(
    store: MemoryBackend,
) -> None:
    await seed_cursor(store)
    recording = RecordingBackend(store)
    faulty = FaultyBackend(recording)
    faulty.add(*hold_after_write(Fault.WRITE_FAILS, reads=6))
    email = claimer(faulty)
    mailbox = CountingMailbox([mail(1)])
    await email.run_cycle(mailbox.fetch)
    held = email.held
    assert held is not None
    await email.run_cycle(mailbox.fetch)
    assert recording.writes == []  # the read-backs failed: nothing may be written
    mailbox.mails.append(mail(2))
    settled = await email.run_cycle(mailbox.fetch)
    resend = recording.writes[0]
    assert (resend.content, resend.if_match) == (held.write.content, held.write.expected_etag)
    assert settled.settled is Settlement.OURS and settled.deliver == (mail(1), mail(2))


@pytest.mark.parametrize("unusable", [Fault.READ_CORRUPT, Fault.READ_MISSING_ETAG])
async def test_a_read_back_that_is_not_a_timestamp_or_has_no_etag_settles_nothing(
    store: MemoryBackend, unusable: Fault
) -> None:
    await seed_cursor(store)
    faulty = FaultyBackend(store)
    faulty.add(FaultRule(Fault.WRITE_RESPONSE_LOST, times=1), FaultRule(unusable, skip=1, times=3))
    email = claimer(faulty)
    cycle = await email.run_cycle(CountingMailbox([mail(1)]).fetch)
    assert cycle.outcome is EmailCycleOutcome.HOLDING and cycle.deliver == ()
    assert (await email.run_cycle(CountingMailbox([mail(1)]).fetch)).deliver == (mail(1),)


async def test_a_claim_cancelled_mid_write_is_held_and_delivered_after_settling(
    store: MemoryBackend,
) -> None:
    await seed_cursor(store)
    email = claimer(CancelledAfterCommit(store))
    mailbox = CountingMailbox([mail(1)])
    with pytest.raises(asyncio.CancelledError):
        await email.run_cycle(mailbox.fetch)
    assert email.state is EmailState.HOLDING
    assert (await email.run_cycle(mailbox.fetch)).deliver == (mail(1),)

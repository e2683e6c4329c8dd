"""claim_delivery against a real store (LocalBackend, and Blob on Azurite), with injected faults.

Each test pins one fail-closed rule: an ambiguity claims nothing and loses nothing; an uncertain
write is settled, so its messages are pushed exactly once.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace

import pytest

from service.domain.conversation import TEAMS_CHATS
from service.ledger.claims.chat_claim_types import ChatClaimOutcome, ClaimProblem
from service.ledger.claims.chat_claims import resolve_cursor
from service.ledger.claims.chat_cursor import (
    Candidate,
    ChatCursor,
    ClaimMark,
    parse_chat_cursor,
    render_chat_cursor,
)
from service.ledger.claims.chat_ledger import ChatLedger
from service.ledger.claims.settle import Settlement
from service.ledger.records.cas import UpdateOutcome
from service.ledger.records.reads import ReadOutcome
from service.storage.backend import MemoryBackend
from service.storage.errors import ConcurrencyError
from service.storage.faults import Fault, FaultRule, FaultyBackend
from service.telemetry.metrics import LedgerMetrics, Metrics
from tests.ledger.ledger_helpers import (
    CancelledAfterCommit,
    FakeClock,
    RecordingBackend,
    message,
    messages,
    sample,
)

CHAT = "19:meeting_abc@thread.v2"
KEY = TEAMS_CHATS.cursor_key(CHAT)


def ids(first: int, last: int) -> tuple[str, ...]:
    return tuple(c.id for c in messages(first, last))


async def stored_cursor(backend: MemoryBackend) -> ChatCursor:
    return parse_chat_cursor(await backend.read_text(KEY) or "")


# --- the plain race ---


async def test_a_new_chat_is_claimed_with_if_absent_and_marked_bootstrapped(
    store: MemoryBackend, clock: FakeClock
) -> None:
    recording = RecordingBackend(store)
    claim = await ChatLedger[Candidate](recording, clock=clock, metrics=LedgerMetrics()).claim(
        CHAT, messages(1, 3)
    )
    assert claim.outcome is ChatClaimOutcome.CLAIMED and claim.ids == ids(1, 3)
    assert [(w.if_absent, w.if_match) for w in recording.writes_to(KEY)] == [(True, None)]
    cursor = await stored_cursor(store)
    assert (
        cursor.bootstrapped
        and cursor.last_ts == message(3).ts
        and cursor.seen_ids_tail == ids(1, 3)
    )


async def test_a_replica_offering_messages_another_claimed_wins_none_and_may_advance(
    store: MemoryBackend,
) -> None:
    await ChatLedger[Candidate](store, metrics=LedgerMetrics()).claim(CHAT, messages(1, 3))
    claim = await ChatLedger[Candidate](store, metrics=LedgerMetrics()).claim(CHAT, messages(1, 3))
    assert claim.outcome is ChatClaimOutcome.LOST and claim.ids == () and claim.may_advance


async def test_overlapping_offers_split_the_messages_without_overlap(store: MemoryBackend) -> None:
    first = await ChatLedger[Candidate](store, metrics=LedgerMetrics()).claim(CHAT, messages(1, 3))
    second = await ChatLedger[Candidate](store, metrics=LedgerMetrics()).claim(CHAT, messages(2, 6))
    assert first.ids == ids(1, 3) and second.ids == ids(4, 6)
    recording = RecordingBackend(store)
    await ChatLedger[Candidate](recording, metrics=LedgerMetrics()).claim(CHAT, messages(7, 7))
    assert recording.writes_to(KEY)[0].if_match is not None  # every later write is an If-Match


async def test_no_candidates_means_nothing_new_without_touching_the_store(
    store: MemoryBackend,
) -> None:
    faulty = FaultyBackend(store)
    faulty.add(FaultRule(Fault.READ_FAILS))
    claim = await ChatLedger[Candidate](faulty, metrics=LedgerMetrics()).claim(CHAT, [])
    assert claim.outcome is ChatClaimOutcome.NOTHING_NEW and claim.may_advance
    assert faulty.injected[Fault.READ_FAILS] == 0


async def test_a_burst_over_50_is_claimed_whole_and_stays_claimed(store: MemoryBackend) -> None:
    burst = messages(1, 120)
    first = await ChatLedger[Candidate](store, metrics=LedgerMetrics()).claim(CHAT, burst)
    again = await ChatLedger[Candidate](store, metrics=LedgerMetrics()).claim(CHAT, burst)
    assert first.ids == ids(1, 120)
    assert again.outcome is ChatClaimOutcome.LOST and again.ids == ()
    assert len((await stored_cursor(store)).seen_ids_tail) == 50


# --- a cursor the caller read a moment ago ---


async def test_a_claim_given_the_cursor_read_before_the_graph_read_writes_against_it_without_reading_again(
    store: MemoryBackend,
) -> None:
    await ChatLedger[Candidate](store, metrics=LedgerMetrics()).claim(CHAT, messages(1, 1))
    known = await resolve_cursor(store, TEAMS_CHATS, CHAT)
    faulty = FaultyBackend(store)
    faulty.add(FaultRule(Fault.READ_FAILS, key=KEY))  # a read of the cursor now would claim nothing
    recording = RecordingBackend(faulty)
    claim = await ChatLedger[Candidate](recording, metrics=LedgerMetrics()).claim(
        CHAT, messages(1, 3), known=known
    )
    assert claim.outcome is ChatClaimOutcome.CLAIMED and claim.ids == ids(2, 3)
    assert faulty.injected[Fault.READ_FAILS] == 0
    assert [w.if_match for w in recording.writes_to(KEY)] == [known.etag]


async def test_a_stale_cursor_read_costs_a_lost_race_never_a_duplicate(
    store: MemoryBackend,
) -> None:
    await ChatLedger[Candidate](store, metrics=LedgerMetrics()).claim(CHAT, messages(1, 1))
    known = await resolve_cursor(store, TEAMS_CHATS, CHAT)
    sibling = await ChatLedger[Candidate](store, metrics=LedgerMetrics()).claim(
        CHAT, messages(2, 3)
    )  # lands after our look
    recording = RecordingBackend(store)
    metrics = Metrics()
    claim = await ChatLedger[Candidate](recording, metrics=metrics.ledger).claim(
        CHAT, messages(2, 5), known=known
    )
    assert sibling.ids == ids(2, 3) and claim.ids == ids(4, 5)
    assert (
        len(recording.writes_to(KEY)) == 2
    )  # the stale write lost, the one decided on a re-read won
    assert sample(metrics, "entrabot_cas_conflicts_total", ledger="chat") == 1
    assert (await stored_cursor(store)).seen_ids_tail == ids(1, 5)


async def test_a_new_chat_seen_absent_a_moment_ago_is_still_claimed_only_if_absent(
    store: MemoryBackend,
) -> None:
    known = await resolve_cursor(store, TEAMS_CHATS, CHAT)
    assert known.outcome is ReadOutcome.ABSENT
    await ChatLedger[Candidate](store, metrics=LedgerMetrics()).claim(
        CHAT, messages(1, 2)
    )  # a sibling's first claim
    claim = await ChatLedger[Candidate](store, metrics=LedgerMetrics()).claim(
        CHAT, messages(2, 2), new_chat=True, known=known
    )
    assert claim.outcome is ChatClaimOutcome.NOTHING_NEW and claim.ids == ()
    assert (await stored_cursor(store)).seen_ids_tail == ids(1, 2)


async def test_an_unresolved_cursor_read_is_not_used_the_claim_reads_for_itself(
    store: MemoryBackend,
) -> None:
    faulty = FaultyBackend(store)
    faulty.add(FaultRule(Fault.READ_FAILS, key=KEY, times=1))
    known = await resolve_cursor(faulty, TEAMS_CHATS, CHAT)
    assert known.outcome is ReadOutcome.UNRESOLVED
    claim = await ChatLedger[Candidate](faulty, metrics=LedgerMetrics()).claim(
        CHAT, messages(1, 2), known=known
    )
    assert claim.outcome is ChatClaimOutcome.CLAIMED and claim.ids == ids(1, 2)


# --- reads that fail closed ---


async def test_an_unreadable_cursor_claims_nothing_and_loses_nothing(store: MemoryBackend) -> None:
    faulty = FaultyBackend(store)
    faulty.add(FaultRule(Fault.READ_FAILS, times=1))
    ledger = ChatLedger[Candidate](faulty, metrics=LedgerMetrics())
    claim = await ledger.claim(CHAT, messages(1, 3))
    assert (
        claim.outcome is ChatClaimOutcome.UNRESOLVED and claim.problem is ClaimProblem.READ_FAILED
    )
    assert claim.ids == () and not claim.may_advance
    assert not await store.exists(KEY)  # an unreadable cursor is never mistaken for a new chat
    retry = await ledger.claim(CHAT, messages(1, 3))
    assert retry.ids == ids(1, 3)


async def test_a_corrupt_cursor_claims_nothing_and_is_never_overwritten(
    store: MemoryBackend,
) -> None:
    await store.write_text(KEY, '{"last_ts": "not a time", "seen_ids_tail": []}')
    claim = await ChatLedger[Candidate](store, metrics=LedgerMetrics()).claim(CHAT, messages(1, 3))
    assert claim.outcome is ChatClaimOutcome.UNRESOLVED and claim.problem is ClaimProblem.CORRUPT
    assert await store.read_text(KEY) == '{"last_ts": "not a time", "seen_ids_tail": []}'


async def test_an_error_page_instead_of_the_cursor_claims_nothing(store: MemoryBackend) -> None:
    await ChatLedger[Candidate](store, metrics=LedgerMetrics()).claim(CHAT, messages(1, 1))
    faulty = FaultyBackend(store)
    faulty.add(FaultRule(Fault.READ_CORRUPT, times=1))
    claim = await ChatLedger[Candidate](faulty, metrics=LedgerMetrics()).claim(CHAT, messages(2, 3))
    assert claim.problem is ClaimProblem.CORRUPT and claim.ids == ()
    assert (await stored_cursor(store)).seen_ids_tail == ids(1, 1)


async def test_a_cursor_without_an_etag_claims_nothing(store: MemoryBackend) -> None:
    await ChatLedger[Candidate](store, metrics=LedgerMetrics()).claim(CHAT, messages(1, 1))
    faulty = FaultyBackend(store)
    faulty.add(FaultRule(Fault.READ_MISSING_ETAG, times=1))
    claim = await ChatLedger[Candidate](faulty, metrics=LedgerMetrics()).claim(CHAT, messages(2, 3))
    assert claim.problem is ClaimProblem.NO_ETAG and not claim.may_advance


async def test_resolve_cursor_classifies_absent_present_and_unresolved(
    store: MemoryBackend,
) -> None:
    assert (await resolve_cursor(store, TEAMS_CHATS, CHAT)).outcome is ReadOutcome.ABSENT
    await ChatLedger[Candidate](store, metrics=LedgerMetrics()).claim(CHAT, messages(1, 1))
    present = await resolve_cursor(store, TEAMS_CHATS, CHAT)
    assert present.outcome is ReadOutcome.PRESENT and present.etag is not None
    faulty = FaultyBackend(store)
    faulty.add(FaultRule(Fault.READ_FAILS))
    assert (await resolve_cursor(faulty, TEAMS_CHATS, CHAT)).outcome is ReadOutcome.UNRESOLVED


# --- exhausted retries ---


class SiblingTouchesFirst:
    """Before each of our cursor writes, a sibling replica lands a write of its own (a claim mark)."""

    def __init__(self, inner: MemoryBackend) -> None:
        self.inner = inner
        self.touches = 0

    def __getattr__(self, name: str):  # noqa: ANN204 - forwards the rest of the protocol
        return getattr(self.inner, name)

    async def write_text(
        self, key: str, content: str, *, if_match: str | None = None, if_absent: bool = False
    ) -> str:
        if self.touches < 1_000:
            text, etag = await self.inner.read_text_with_etag(key)
            cursor = parse_chat_cursor(text or "")
            self.touches += 1
            touched = replace(
                cursor,
                claims=(ClaimMark(f"sibling-{self.touches}", cursor.last_ts or FakeClock()()),),
            )
            await self.inner.write_text(key, render_chat_cursor(touched), if_match=etag)
        return await self.inner.write_text(key, content, if_match=if_match, if_absent=if_absent)


async def test_exhausted_retries_claim_nothing_and_keep_the_messages_for_later(
    store: MemoryBackend,
) -> None:
    await ChatLedger[Candidate](store, metrics=LedgerMetrics()).claim(CHAT, messages(1, 1))
    racing = SiblingTouchesFirst(store)
    metrics = Metrics()
    ledger = ChatLedger[Candidate](racing, metrics=metrics.ledger)
    claim = await ledger.claim(CHAT, messages(2, 4))
    assert claim.outcome is ChatClaimOutcome.UNRESOLVED and claim.problem is ClaimProblem.EXHAUSTED
    assert claim.ids == () and not claim.may_advance and claim.writes == 4
    assert sample(metrics, "entrabot_cas_conflicts_total", ledger="chat") == 4
    racing.touches = 1_000  # the sibling goes quiet
    assert (await ledger.claim(CHAT, messages(2, 4))).ids == ids(2, 4)


# --- writes whose outcome is unknown ---


async def test_a_committed_write_whose_response_was_lost_is_settled_as_ours_and_pushed_once(
    store: MemoryBackend,
) -> None:
    recording = RecordingBackend(store)
    faulty = FaultyBackend(recording)
    faulty.add(FaultRule(Fault.WRITE_RESPONSE_LOST, times=1))
    metrics = Metrics()
    ledger = ChatLedger[Candidate](faulty, metrics=metrics.ledger)
    claim = await ledger.claim(CHAT, messages(1, 3))
    assert claim.outcome is ChatClaimOutcome.CLAIMED and claim.ids == ids(1, 3)
    assert len(recording.writes_to(KEY)) == 1 and ledger.unsettled_chats == frozenset()
    assert (await ledger.claim(CHAT, messages(1, 3))).ids == ()
    assert metrics.ledger.chat_settle.labels(outcome="ours")._value.get() == 1
    assert metrics.ledger.chat_unsettled._value.get() == 0


async def test_a_conflict_reported_for_a_write_that_committed_is_settled_as_ours(
    store: MemoryBackend,
) -> None:
    faulty = FaultyBackend(store)
    faulty.add(FaultRule(Fault.WRITE_RESPONSE_LOST, times=1, error=ConcurrencyError))
    claim = await ChatLedger[Candidate](faulty, metrics=LedgerMetrics()).claim(CHAT, messages(1, 3))
    assert claim.outcome is ChatClaimOutcome.CLAIMED and claim.ids == ids(1, 3)


async def test_an_unknown_write_is_settled_first_next_cycle_and_pushed_then(
    store: MemoryBackend,
) -> None:
    faulty = FaultyBackend(store)
    # The claim's read succeeds, its write commits but the answer is lost, and the three read-backs fail.
    faulty.add(
        FaultRule(Fault.WRITE_RESPONSE_LOST, times=1), FaultRule(Fault.READ_FAILS, skip=1, times=3)
    )
    ledger = ChatLedger[Candidate](faulty, metrics=LedgerMetrics())
    first = await ledger.claim(CHAT, messages(1, 3))
    assert (
        first.outcome is ChatClaimOutcome.UNRESOLVED
        and first.problem is ClaimProblem.UNKNOWN_OUTCOME
    )
    assert first.ids == () and not first.may_advance and ledger.unsettled_chats == {CHAT}
    # The stored cursor already says 1..3 are claimed: only our settling can push them now.
    sibling = await ChatLedger[Candidate](store, metrics=LedgerMetrics()).claim(
        CHAT, messages(1, 3)
    )
    assert sibling.outcome is ChatClaimOutcome.LOST and sibling.ids == ()
    second = await ledger.claim(CHAT, messages(1, 4))
    assert second.settled is Settlement.OURS
    assert second.outcome is ChatClaimOutcome.CLAIMED and second.ids == ids(1, 4)
    third = await ledger.claim(CHAT, messages(1, 4))
    assert third.ids == () and ledger.unsettled_chats == frozenset()


@dataclass(frozen=True)
class Posted:
    """An offered message as a worker holds it: its candidate and what a host would be handed."""

    candidate: Candidate
    text: str


async def test_a_claim_in_doubt_keeps_its_messages_and_returns_them_when_it_settles_as_ours(
    store: MemoryBackend,
) -> None:
    faulty = FaultyBackend(store)
    faulty.add(
        FaultRule(Fault.WRITE_RESPONSE_LOST, times=1), FaultRule(Fault.READ_FAILS, skip=1, times=3)
    )
    ledger: ChatLedger[Posted] = ChatLedger(faulty, metrics=LedgerMetrics())
    offered = [Posted(c, f"text {n}") for n, c in enumerate(messages(1, 2), start=1)]
    assert (await ledger.claim(CHAT, offered)).problem is ClaimProblem.UNKNOWN_OUTCOME
    # The next read no longer carries them (edited away, past a page): the ledger still has them.
    settled = await ledger.claim(CHAT, [Posted(message(3), "text 3")])
    assert settled.settled is Settlement.OURS
    assert [p.text for p in settled.won] == ["text 1", "text 2", "text 3"]
    assert settled.won[0] is offered[0]


async def test_an_unsettled_write_blocks_new_claims_on_that_chat_until_it_settles(
    store: MemoryBackend,
) -> None:
    faulty = FaultyBackend(store)
    faulty.add(
        FaultRule(Fault.WRITE_RESPONSE_LOST, times=1), FaultRule(Fault.READ_FAILS, skip=1, times=6)
    )
    ledger = ChatLedger[Candidate](faulty, metrics=LedgerMetrics())
    await ledger.claim(CHAT, messages(1, 3))
    still = await ledger.claim(CHAT, messages(1, 5))
    assert still.outcome is ChatClaimOutcome.UNRESOLVED and still.problem is ClaimProblem.UNSETTLED
    assert still.settled is Settlement.UNKNOWN and still.ids == ()


async def test_an_unknown_write_that_never_landed_leaves_its_messages_claimable(
    store: MemoryBackend,
) -> None:
    faulty = FaultyBackend(store)
    faulty.add(FaultRule(Fault.WRITE_FAILS, times=1), FaultRule(Fault.READ_FAILS, skip=1, times=3))
    ledger = ChatLedger[Candidate](faulty, metrics=LedgerMetrics())
    assert (await ledger.claim(CHAT, messages(1, 3))).problem is ClaimProblem.UNKNOWN_OUTCOME
    sibling = await ChatLedger[Candidate](store, metrics=LedgerMetrics()).claim(
        CHAT, messages(1, 2)
    )
    assert sibling.ids == ids(1, 2)
    settled = await ledger.claim(CHAT, messages(1, 3))
    assert settled.settled is Settlement.LOST
    assert settled.outcome is ChatClaimOutcome.CLAIMED and settled.ids == ids(3, 3)


async def test_a_late_commit_after_a_timeout_is_never_a_duplicate(store: MemoryBackend) -> None:
    faulty = FaultyBackend(store)
    faulty.add(FaultRule(Fault.WRITE_COMMITS_LATE, times=1, delay_s=0.05))
    mine = await ChatLedger[Candidate](faulty, metrics=LedgerMetrics()).claim(CHAT, messages(1, 3))
    await faulty.drain()
    theirs = await ChatLedger[Candidate](store, metrics=LedgerMetrics()).claim(CHAT, messages(1, 3))
    assert mine.ids == ids(1, 3) and theirs.ids == ()


async def test_a_claim_cancelled_mid_write_is_settled_and_pushed_on_the_next_call(
    store: MemoryBackend,
) -> None:
    ledger = ChatLedger[Candidate](CancelledAfterCommit(store), metrics=LedgerMetrics())
    with pytest.raises(asyncio.CancelledError):
        await ledger.claim(CHAT, messages(1, 2))
    assert ledger.unsettled_chats == {CHAT}
    after = await ledger.claim(CHAT, messages(1, 2))
    assert after.settled is Settlement.OURS and after.ids == ids(1, 2)


# --- first sight without a delivery ---


async def test_a_baseline_is_written_only_for_an_absent_cursor(
    store: MemoryBackend, clock: FakeClock
) -> None:
    ledger = ChatLedger[Candidate](store, clock=clock, metrics=LedgerMetrics())
    first = await ledger.bootstrap(CHAT, messages(1, 3))
    assert first.outcome is UpdateOutcome.WRITTEN
    again = await ledger.bootstrap(CHAT, messages(1, 9))
    assert again.outcome is UpdateOutcome.ALREADY
    assert (await stored_cursor(store)).last_ts == message(3).ts
    claim = await ledger.claim(CHAT, messages(1, 4))
    assert claim.ids == ids(4, 4)


# --- a chat's first watch (a fleet role, no host needed) ---


async def test_a_first_watch_writes_only_an_absent_cursor_and_claims_start_after_it(
    store: MemoryBackend, clock: FakeClock
) -> None:
    recording = RecordingBackend(store)
    role = ChatLedger[Candidate](recording, clock=clock, metrics=LedgerMetrics())
    first = await role.start_watched_chat(CHAT, message(3), surface_newest=False)
    assert first.outcome is UpdateOutcome.WRITTEN
    assert [(w.key, w.if_absent) for w in recording.writes] == [(KEY, True)]
    again = await role.start_watched_chat(CHAT, message(5), surface_newest=True)
    assert again.outcome is UpdateOutcome.ALREADY  # a second watch never moves the watermark
    reader = ChatLedger[Candidate](store, clock=clock, metrics=LedgerMetrics())
    assert (await reader.claim(CHAT, messages(1, 5))).ids == ids(4, 5)


async def test_a_first_watch_never_moves_a_cursor_a_reader_already_claimed_in(
    store: MemoryBackend,
) -> None:
    reader = ChatLedger[Candidate](store, metrics=LedgerMetrics())
    await reader.claim(CHAT, messages(1, 2))
    role = ChatLedger[Candidate](store, metrics=LedgerMetrics())
    assert (await role.start_watched_chat(CHAT, message(4), surface_newest=False)).outcome is (
        UpdateOutcome.ALREADY
    )
    assert (await reader.claim(CHAT, messages(1, 4))).ids == ids(3, 4)


async def test_a_first_watch_over_a_corrupt_cursor_writes_nothing(store: MemoryBackend) -> None:
    await store.write_text(KEY, "<html>502</html>")
    role = ChatLedger[Candidate](store, metrics=LedgerMetrics())
    update = await role.start_watched_chat(CHAT, message(4), surface_newest=False)
    assert update.outcome is UpdateOutcome.UNRESOLVED
    assert await store.read_text(KEY) == "<html>502</html>"  # fails closed: left for a repair


# --- a chat made by create_chat ---


async def test_a_created_chat_cursor_makes_its_newest_message_claimable_for_any_replica_and_nothing_older(
    store: MemoryBackend, clock: FakeClock
) -> None:
    maker, other = (
        ChatLedger[Candidate](store, clock=clock, metrics=LedgerMetrics()),
        ChatLedger[Candidate](store, clock=clock, metrics=LedgerMetrics()),
    )
    assert (await maker.start_created_chat(CHAT, message(5))).outcome is UpdateOutcome.WRITTEN
    claim = await other.claim(CHAT, messages(1, 6))  # a replica that never saw the create_chat call
    assert claim.outcome is ChatClaimOutcome.CLAIMED and claim.ids == ids(5, 6)


async def test_a_created_chat_never_moves_a_cursor_the_fleet_already_has(
    store: MemoryBackend,
) -> None:
    ledger = ChatLedger[Candidate](store, metrics=LedgerMetrics())
    await ledger.bootstrap(CHAT, messages(1, 5))
    assert (await ledger.start_created_chat(CHAT, message(3))).outcome is UpdateOutcome.ALREADY
    assert (await ledger.claim(CHAT, messages(1, 6))).ids == ids(6, 6)


async def test_an_empty_created_chat_takes_its_first_message(store: MemoryBackend) -> None:
    ledger = ChatLedger[Candidate](store, metrics=LedgerMetrics())
    await ledger.start_created_chat(CHAT, None)
    assert (await ledger.claim(CHAT, messages(1, 1))).ids == ids(1, 1)


# --- telemetry ---


async def test_claims_are_counted_by_outcome(store: MemoryBackend) -> None:
    metrics = Metrics()
    await ChatLedger[Candidate](store, metrics=metrics.ledger).claim(CHAT, messages(1, 3))
    await ChatLedger[Candidate](store, metrics=metrics.ledger).claim(CHAT, messages(1, 3))
    assert sample(metrics, "entrabot_claims_total", ledger="chat", outcome="claimed") == 1
    assert sample(metrics, "entrabot_claims_total", ledger="chat", outcome="lost") == 1
    assert sample(metrics, "entrabot_claimed_messages_total", ledger="chat") == 3

"""A chat whose cursor is corrupt is counted (gauge and list) while it stays so, whichever read
finds it: the first read of the chat, or a claim of a chat polled for a while."""

from __future__ import annotations

from service.domain.conversation import TEAMS_CHATS
from service.ledger.claims.chat_claim_types import ChatClaimOutcome, ClaimProblem
from service.ledger.claims.chat_cursor import Candidate
from service.ledger.claims.chat_ledger import ChatLedger
from service.ledger.records.reads import ReadOutcome
from service.storage.backend import MemoryBackend
from service.storage.faults import Fault, FaultRule, FaultyBackend
from service.telemetry.metrics import Metrics
from tests.ledger.ledger_helpers import messages

CHAT = "19:stalled@thread.v2"
OTHER = "19:fine@thread.v2"


def corrupt_gauge(metrics: Metrics) -> float | None:
    return metrics.registry.get_sample_value("entrabot_chat_cursors_corrupt")


async def test_a_claim_against_a_corrupt_cursor_counts_the_chat_until_a_readable_cursor_clears_it(
    store: MemoryBackend,
) -> None:
    metrics = Metrics()
    ledger = ChatLedger[Candidate](store, metrics=metrics.ledger)
    await ledger.claim(CHAT, messages(1, 2))  # polled for a while…
    await ledger.claim(OTHER, messages(1, 2))
    await store.write_text(TEAMS_CHATS.cursor_key(CHAT), "{not json")  # …then the value goes bad
    stalled = await ledger.claim(CHAT, messages(3, 3))
    assert (
        stalled.outcome is ChatClaimOutcome.UNRESOLVED and stalled.problem is ClaimProblem.CORRUPT
    )
    assert ledger.corrupt.chat_ids == (CHAT,) and corrupt_gauge(metrics) == 1.0
    await ledger.claim(OTHER, messages(3, 3))  # another chat's claims change nothing
    assert ledger.corrupt.chat_ids == (CHAT,)
    await store.write_text(
        TEAMS_CHATS.cursor_key(CHAT), '{"last_ts": null, "seen_ids_tail": []}'
    )  # repaired
    resumed = await ledger.claim(CHAT, messages(3, 3))
    assert resumed.outcome is ChatClaimOutcome.CLAIMED
    ledger = ledger  # mypy keeps the narrowing of ledger.corrupt.chat_ids above across claim(); this drops it
    assert ledger.corrupt.chat_ids == () and corrupt_gauge(metrics) == 0.0


async def test_a_failed_read_neither_counts_a_chat_nor_clears_one(store: MemoryBackend) -> None:
    metrics = Metrics()
    faulty = FaultyBackend(store)
    ledger = ChatLedger[Candidate](faulty, metrics=metrics.ledger)
    await store.write_text(TEAMS_CHATS.cursor_key(CHAT), "[]")
    assert (await ledger.resolve(CHAT)).outcome is ReadOutcome.UNRESOLVED
    assert ledger.corrupt.chat_ids == (CHAT,)
    faulty.add(FaultRule(Fault.READ_FAILS))
    assert (await ledger.resolve(CHAT)).outcome is ReadOutcome.UNRESOLVED
    assert (await ledger.resolve(OTHER)).outcome is ReadOutcome.UNRESOLVED
    assert ledger.corrupt.chat_ids == (CHAT,) and corrupt_gauge(metrics) == 1.0

"""Pre-seeding a benchmark fleet's ledger writes what first sight of an empty chat would have: every
chat watched, each cursor bootstrapped with no watermark, so the chat's first message is new."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from bench.ledger_preseed import preseed_ledger
from service.ledger.claims.chat_cursor import Candidate, decide_claim
from service.ledger.claims.chat_ledger import ChatLedger
from service.ledger.memory.watched_chats import WatchedChats
from service.ledger.records.reads import ReadOutcome
from service.storage.local import LocalBackend
from service.telemetry.metrics import LedgerMetrics

CHATS = ["19:a@thread.v2", "19:b@thread.v2", "19:c@thread.v2"]


async def test_preseeded_chats_are_watched_and_their_first_message_is_claimable(
    tmp_path: Path,
) -> None:
    backend = LocalBackend(tmp_path / "store")
    done = await preseed_ledger(backend, CHATS)
    assert (done.chats, done.cursors_written, done.cursors_present) == (3, 3, 0)
    watched = WatchedChats(backend, metrics=LedgerMetrics())
    assert await watched.load() is ReadOutcome.PRESENT
    assert watched.chats == frozenset(CHATS)
    read = await ChatLedger(backend, metrics=LedgerMetrics()).resolve(CHATS[1])
    assert read.outcome is ReadOutcome.PRESENT and read.value is not None
    assert read.value.bootstrapped and read.value.last_ts is None
    first = Candidate("1764410400123", datetime(2026, 12, 1, tzinfo=timezone.utc))
    assert decide_claim(read.value, [first]).claimable == (first,)


async def test_preseeding_again_leaves_existing_cursors_alone(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "store")
    await preseed_ledger(backend, CHATS[:2])
    again = await preseed_ledger(backend, CHATS)
    assert (again.cursors_written, again.cursors_present) == (1, 2)
    watched = WatchedChats(backend, metrics=LedgerMetrics())
    await watched.load()
    assert watched.chats == frozenset(CHATS)

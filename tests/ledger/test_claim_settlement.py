"""Settling an uncertain claim write: every case the seed names, one test each, then the loop."""

from __future__ import annotations

from pathlib import Path

from service.ledger.claims.email_cursor import (
    EMAIL_CURSOR_KEY,
    EmailCursor,
    parse_email_cursor,
    render_email_cursor,
)
from service.ledger.claims.settle import (
    ClaimWrite,
    Settlement,
    decide_settle,
    settle_uncertain_write,
    write_claim,
)
from service.ledger.records.reads import Read, ReadOutcome, UnresolvedReason, read_parsed
from service.storage.faults import Fault, FaultRule, FaultyBackend
from service.storage.local import LocalBackend
from tests.ledger.ledger_helpers import T0, RecordingBackend

OURS_ID = "claim-ours"
EXPECTED = '"etag-before"'


def present(*claim_ids: str, etag: str | None = '"etag-after"') -> Read[EmailCursor]:
    return Read(ReadOutcome.PRESENT, EmailCursor(T0, claim_ids), etag=etag)


def test_a_failed_read_back_settles_nothing() -> None:
    read: Read[EmailCursor] = Read.unresolved(UnresolvedReason.READ_FAILED)
    assert decide_settle(read, OURS_ID, expected_etag=EXPECTED) is Settlement.UNKNOWN


def test_a_value_that_is_not_a_timestamp_settles_nothing() -> None:
    read: Read[EmailCursor] = Read.unresolved(UnresolvedReason.CORRUPT)
    assert decide_settle(read, OURS_ID, expected_etag=EXPECTED) is Settlement.UNKNOWN


def test_a_value_without_an_etag_settles_nothing() -> None:
    read: Read[EmailCursor] = Read.unresolved(UnresolvedReason.NO_ETAG)
    assert decide_settle(read, OURS_ID, expected_etag=EXPECTED) is Settlement.UNKNOWN


def test_our_claim_id_in_the_value_means_the_claim_is_ours() -> None:
    assert (
        decide_settle(present("newer", OURS_ID), OURS_ID, expected_etag=EXPECTED) is Settlement.OURS
    )


def test_the_same_etag_without_our_id_means_nothing_landed_so_the_same_write_is_retried() -> None:
    assert (
        decide_settle(present("older", etag=EXPECTED), OURS_ID, expected_etag=EXPECTED)
        is Settlement.RETRY
    )


def test_a_different_etag_without_our_id_means_another_write_landed_first() -> None:
    assert decide_settle(present("theirs"), OURS_ID, expected_etag=EXPECTED) is Settlement.LOST


def test_an_absent_key_after_a_create_means_nothing_landed_so_the_create_is_retried() -> None:
    assert decide_settle(Read.absent(), OURS_ID, expected_etag=None) is Settlement.RETRY


def test_an_absent_key_after_an_if_match_means_it_was_deleted_and_ours_can_never_commit() -> None:
    assert decide_settle(Read.absent(), OURS_ID, expected_etag=EXPECTED) is Settlement.LOST


# --- the settle loop against a store ---


async def _seeded(tmp_path: Path) -> tuple[FaultyBackend, RecordingBackend, ClaimWrite]:
    local = LocalBackend(tmp_path / "store")
    etag = await local.write_text(
        EMAIL_CURSOR_KEY, render_email_cursor(EmailCursor(T0, ("older",)))
    )
    recording = RecordingBackend(local)
    faulty = FaultyBackend(recording)
    content = render_email_cursor(EmailCursor(T0.replace(hour=11), (OURS_ID, "older")))
    return faulty, recording, ClaimWrite(EMAIL_CURSOR_KEY, content, etag, OURS_ID)


async def test_a_write_that_failed_before_committing_is_resent_with_the_same_if_match_and_becomes_ours(
    tmp_path: Path,
) -> None:
    faulty, recording, write = await _seeded(tmp_path)
    faulty.add(FaultRule(Fault.WRITE_FAILS, times=1))
    result = await write_claim(
        faulty, write, lambda: read_parsed(faulty, EMAIL_CURSOR_KEY, parse_email_cursor)
    )
    assert result.settlement is Settlement.OURS and result.failed
    sent = recording.writes_to(EMAIL_CURSOR_KEY)
    assert len(sent) == 1  # the failed one never reached the store; the resend did
    assert (sent[0].content, sent[0].if_match) == (write.content, write.expected_etag)


async def test_a_write_that_committed_but_lost_its_response_is_found_by_its_claim_id(
    tmp_path: Path,
) -> None:
    faulty, recording, write = await _seeded(tmp_path)
    faulty.add(FaultRule(Fault.WRITE_RESPONSE_LOST, times=1))
    result = await write_claim(
        faulty, write, lambda: read_parsed(faulty, EMAIL_CURSOR_KEY, parse_email_cursor)
    )
    assert result.settlement is Settlement.OURS
    assert (
        len(recording.writes_to(EMAIL_CURSOR_KEY)) == 1
    )  # found by reading back, not written twice


async def test_a_late_commit_and_its_resend_cannot_both_land(tmp_path: Path) -> None:
    faulty, recording, write = await _seeded(tmp_path)
    faulty.add(FaultRule(Fault.WRITE_COMMITS_LATE, times=1, delay_s=0.05))
    result = await write_claim(
        faulty, write, lambda: read_parsed(faulty, EMAIL_CURSOR_KEY, parse_email_cursor)
    )
    await faulty.drain()
    assert result.settlement is Settlement.OURS
    stored = parse_email_cursor(await faulty.read_text(EMAIL_CURSOR_KEY) or "")
    assert stored.claim_ids == (OURS_ID, "older")
    # The resend and the late original both carried the same If-Match: only one could commit.
    assert {w.if_match for w in recording.writes_to(EMAIL_CURSOR_KEY)} == {write.expected_etag}


async def test_reads_that_keep_failing_leave_the_claim_unknown_after_the_bounded_rounds(
    tmp_path: Path,
) -> None:
    faulty, recording, write = await _seeded(tmp_path)
    faulty.add(FaultRule(Fault.WRITE_FAILS, times=1), FaultRule(Fault.READ_FAILS))
    result = await write_claim(
        faulty, write, lambda: read_parsed(faulty, EMAIL_CURSOR_KEY, parse_email_cursor), rounds=3
    )
    assert result.settlement is Settlement.UNKNOWN
    assert faulty.injected[Fault.READ_FAILS] == 3
    assert recording.writes_to(EMAIL_CURSOR_KEY) == []


async def test_settling_after_another_write_landed_reports_lost_and_sends_nothing(
    tmp_path: Path,
) -> None:
    faulty, recording, write = await _seeded(tmp_path)
    theirs = render_email_cursor(EmailCursor(T0.replace(hour=12), ("theirs",)))
    await recording.inner.write_text(EMAIL_CURSOR_KEY, theirs)
    result = await settle_uncertain_write(
        faulty, write, lambda: read_parsed(faulty, EMAIL_CURSOR_KEY, parse_email_cursor)
    )
    assert result.settlement is Settlement.LOST
    assert recording.writes_to(EMAIL_CURSOR_KEY) == []

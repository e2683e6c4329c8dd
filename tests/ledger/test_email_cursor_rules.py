"""The pure email-cursor rules: the stored format, advancing a claim, what counts as new mail."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.ledger.claims.email_cursor import (
    CLAIM_IDS_KEPT,
    EmailCursor,
    advance,
    initial_cursor,
    new_mail,
    parse_email_cursor,
    render_email_cursor,
)
from service.ledger.records.reads import CorruptValueError
from tests.ledger.ledger_helpers import T0, Mail, mail


def test_the_format_is_a_timestamp_line_then_claim_ids_newest_first() -> None:
    text = render_email_cursor(EmailCursor(T0, ("newest", "older")))
    assert text == "2026-11-29T10:00:00Z\nnewest\nolder\n"
    assert parse_email_cursor(text) == EmailCursor(T0, ("newest", "older"))


def test_a_single_host_cursor_of_one_timestamp_reads_with_no_claims() -> None:
    assert parse_email_cursor("2026-11-29T10:00:00.0000000Z") == EmailCursor(T0)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n\n",
        "<html><body>502 Bad Gateway</body></html>",
        "2026-11-29\nabc",
        "2026-11-29T10:00:00Z\na b",
    ],
)
def test_a_value_that_is_not_a_cursor_is_corrupt(text: str) -> None:
    with pytest.raises(CorruptValueError):
        parse_email_cursor(text)


@given(
    st.lists(st.text("abcdef0123456789", min_size=1, max_size=8), max_size=40),
    st.integers(0, 10**6),
)
def test_render_then_parse_is_identity(claim_ids: list[str], seconds: int) -> None:
    cursor = EmailCursor(T0 + timedelta(seconds=seconds), tuple(claim_ids))
    assert parse_email_cursor(render_email_cursor(cursor)) == cursor


def test_a_claim_moves_the_cursor_to_its_newest_mail_and_puts_its_id_first() -> None:
    after = advance(EmailCursor(T0, ("older",)), [mail(3), mail(1), mail(2)], "mine")
    assert after == EmailCursor(mail(3).received_at, ("mine", "older"))


def test_only_the_last_32_claim_ids_are_kept_newest_first() -> None:
    cursor = EmailCursor(T0)
    for n in range(1, 41):
        cursor = advance(cursor, [mail(n)], f"claim-{n}")
    assert cursor.claim_ids == tuple(f"claim-{n}" for n in range(40, 8, -1))
    assert len(cursor.claim_ids) == CLAIM_IDS_KEPT


def test_new_mail_is_strictly_newer_distinct_and_oldest_first() -> None:
    cursor = EmailCursor(mail(2).received_at)
    fetched = [mail(4), mail(2), mail(1), mail(3), mail(3)]
    assert new_mail(cursor, fetched) == (mail(3), mail(4))


def test_a_claim_needs_mail() -> None:
    with pytest.raises(ValueError):
        advance(EmailCursor(T0), [], "mine")


def test_a_missing_cursor_starts_at_now_unless_a_legacy_value_is_adopted() -> None:
    legacy = EmailCursor(T0 - timedelta(hours=3), ("old-claim",))
    assert initial_cursor(T0) == EmailCursor(T0)
    assert initial_cursor(T0, legacy) == legacy


def test_naive_receive_times_are_taken_as_utc() -> None:
    naive = Mail("m", (T0 + timedelta(seconds=1)).replace(tzinfo=None))
    assert new_mail(EmailCursor(T0), [naive]) == (naive,)

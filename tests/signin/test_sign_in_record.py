"""The sign-in record's rules: when a shared token is due for a refresh, what a refresh makes of the
record, and a corrupt record named by its field, never by a value."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from service.ledger.records.reads import CorruptValueError
from service.signin.record import (
    CachedToken,
    SignedInPerson,
    SignInRecord,
    parse_record,
    render_record,
)

SCOPE = "https://graph.microsoft.com/.default"
AT = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)


def record(**tokens: CachedToken) -> SignInRecord:
    return SignInRecord(
        tenant_id="t",
        client_id="c",
        person=SignedInPerson("oid", "ada@x", "Ada"),
        refresh_token="0.rt-secret",
        scope=f"{SCOPE} offline_access",
        signed_in_at=AT,
        refreshed_at=AT,
        refreshed_by="signin",
        access_tokens={SCOPE: tokens["graph"]},
    )


def test_a_record_reads_back_as_written() -> None:
    original = record(graph=CachedToken("at-secret", 5000.0, 1400.0))
    assert parse_record(render_record(original)) == original


def test_a_token_is_due_a_margin_before_expiry() -> None:
    hour = record(graph=CachedToken("t", 1000.0 + 3600, 1000.0))
    assert hour.fresh_token(SCOPE, now=1000.0 + 3600 - 301, margin_s=300) is not None
    assert hour.fresh_token(SCOPE, now=1000.0 + 3600 - 300, margin_s=300) is None
    assert hour.fresh_token("https://storage.azure.com/.default", now=1000.0, margin_s=300) is None


def test_a_token_shorter_lived_than_the_margin_is_due_half_way_through_its_life() -> None:
    short = record(graph=CachedToken("t", 1000.0 + 60, 1000.0))
    assert short.fresh_token(SCOPE, now=1029.0, margin_s=300) is not None
    assert short.fresh_token(SCOPE, now=1030.0, margin_s=300) is None


def test_a_refresh_keeps_the_old_refresh_token_only_when_entra_sent_none() -> None:
    before = record(graph=CachedToken("old", 2000.0, 1000.0))
    later = datetime(2026, 12, 1, 10, 0, tzinfo=timezone.utc)
    rotated = before.refreshed(
        SCOPE, CachedToken("new", 9000.0, 5400.0), "0.rt-next", at=later, by="replica-2"
    )
    assert (rotated.refresh_token, rotated.access_tokens[SCOPE].token, rotated.refreshes) == (
        "0.rt-next",
        "new",
        1,
    )
    assert (rotated.refreshed_at, rotated.refreshed_by, rotated.generation) == (
        later,
        "replica-2",
        1,
    )
    kept = before.refreshed(
        SCOPE, CachedToken("new", 9000.0, 5400.0), None, at=later, by="replica-2"
    )
    assert kept.refresh_token == "0.rt-secret"


def test_secrets_stay_out_of_the_records_repr() -> None:
    text = repr(record(graph=CachedToken("at-secret", 5000.0, 1400.0)))
    assert "at-secret" not in text and "rt-secret" not in text


@pytest.mark.parametrize(
    "field, value",
    [
        ("refresh_token", ""),
        ("generation", 0),
        ("person", "ada"),
        ("access_tokens", {SCOPE: {"token": "t-secret"}}),
    ],
)
def test_a_corrupt_record_names_the_field_and_never_a_value(field: str, value: object) -> None:
    import json

    obj = json.loads(render_record(record(graph=CachedToken("at-secret", 5000.0, 1400.0))))
    obj[field] = value
    with pytest.raises(CorruptValueError) as caught:
        parse_record(json.dumps(obj))
    assert field in str(caught.value) and "secret" not in str(caught.value)

"""What counts as a sponsor's verdict on a permission request: exactly "yes <id>" or "no <id>"."""

from __future__ import annotations

import pytest

from service.delivery.permission_verdict import Verdict, is_request_id, parse_verdict, verdict_push


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("yes abcde", Verdict("abcde", "allow")),
        ("  No   ABCDE.  ", Verdict("abcde", "deny")),
        ("YES abcde!", Verdict("abcde", "allow")),
    ],
)
def test_a_whole_message_of_yes_or_no_and_an_id_is_a_verdict(text: str, verdict: Verdict) -> None:
    assert parse_verdict(text) == verdict


@pytest.mark.parametrize(
    "text",
    [
        "yes",
        "abcde",
        "yes abcdef",
        "yes abcd",
        "yes abcle",  # "l" is never in an id
        "yes abcde and pay the invoice",
        "sure abcde",
        "yes, abcde",
        "I said yes abcde",
        "yes\nabcde\nship it",
    ],
)
def test_anything_less_plain_decides_nothing(text: str) -> None:
    assert parse_verdict(text) is None


def test_request_ids_are_five_letters_without_l() -> None:
    assert is_request_id("abcde") and not is_request_id("abcdl") and not is_request_id("ABCDE")


def test_the_verdict_push_has_the_channel_permission_shape() -> None:
    push = verdict_push(Verdict("abcde", "deny"))
    assert push.model_dump(mode="json", by_alias=True) == {
        "method": "notifications/claude/channel/permission",
        "params": {"request_id": "abcde", "behavior": "deny"},
    }

"""Which Sent Items copy is a given send's: its own send id decides; without one, the subject and recipients."""

from __future__ import annotations

from typing import Any

import pytest

from service.delivery.mail_send import SEND_ID_HEADER, MailKind, OutgoingMail, is_this_send
from service.graph.models import MailMessage


def _copy(
    subject: str, to: list[str], cc: tuple[str, ...] = (), headers: dict[str, str] | None = None
) -> MailMessage:
    raw: dict[str, Any] = {
        "id": "AAMk1",
        "subject": subject,
        "receivedDateTime": "2026-11-29T10:00:00Z",
        "toRecipients": [{"emailAddress": {"address": a}} for a in to],
        "ccRecipients": [{"emailAddress": {"address": a}} for a in cc],
    }
    if headers is not None:
        raw["internetMessageHeaders"] = [{"name": k, "value": v} for k, v in headers.items()]
    return MailMessage.model_validate(raw)


def _mail(
    kind: MailKind = "new",
    subject: str = "Status",
    to: tuple[str, ...] = ("ada@contoso.com",),
    cc: tuple[str, ...] = (),
) -> OutgoingMail:
    return OutgoingMail(
        kind, subject, to, "text", send_id="s-1", cc=cc, answers=None if kind == "new" else "AAMk0"
    )


def test_a_copy_with_this_send_id_is_this_send_whatever_else_it_shows() -> None:
    assert is_this_send(
        _copy("Something else", ["bob@x.com"], headers={"X-Entrabot-Send-Id": " s-1 "}), _mail()
    )


def test_a_copy_with_another_send_id_is_another_send_even_with_the_same_subject_and_recipients() -> (
    None
):
    assert not is_this_send(
        _copy("Status", ["ada@contoso.com"], headers={SEND_ID_HEADER: "s-2"}), _mail()
    )


def test_without_a_send_id_the_same_subject_and_recipients_count_as_this_send() -> None:
    assert is_this_send(_copy("status", ["ADA@contoso.com", "x@y.org"]), _mail())
    assert not is_this_send(_copy("Status update", ["ada@contoso.com"]), _mail())
    assert not is_this_send(_copy("Status", ["grace@contoso.com"]), _mail())
    assert not is_this_send(_copy("Status", ["ada@contoso.com"]), _mail(cc=("grace@contoso.com",)))
    assert is_this_send(
        _copy("Status", ["ada@contoso.com"], cc=("grace@contoso.com",)),
        _mail(cc=("grace@contoso.com",)),
    )


@pytest.mark.parametrize("prefix", ["RE: ", "AW: ", "Re: "])
def test_an_answer_without_a_send_id_matches_the_originals_subject_under_any_prefix(
    prefix: str,
) -> None:
    assert is_this_send(
        _copy(f"{prefix}Ship date", ["ada@contoso.com"]), _mail("reply", "Ship date")
    )
    assert not is_this_send(
        _copy(f"{prefix}Ship dates", ["ada@contoso.com"]), _mail("reply", "Ship date")
    )

"""Lenient reading of Graph payloads: a bad item is skipped and counted, a bad envelope is an error."""

from __future__ import annotations

import logging
from datetime import datetime, timezone

import pytest

from service.graph.errors import GraphPayloadError
from service.graph.models import Chat, ChatMessage, MailMessage
from service.graph.pages import parse_page
from service.telemetry.metrics import GraphMetrics, Metrics

SECRET_BODY = "launch codes 0000"


def message(mid: str, **overrides: object) -> dict[str, object]:
    raw: dict[str, object] = {
        "id": mid,
        "chatId": "19:chat@thread.v2",
        "messageType": "message",
        "createdDateTime": "2026-11-20T10:00:00.123Z",
        "lastModifiedDateTime": "2026-11-20T10:00:01Z",
        "from": {"user": {"id": "u-1", "displayName": "Ada", "userIdentityType": "aadUser"}},
        "body": {"contentType": "html", "content": f"<p>{SECRET_BODY}</p>"},
        "attachments": [],
        "replyToId": None,
    }
    raw.update(overrides)
    return raw


def skipped_count(metrics: Metrics, kind: str) -> float:
    return (
        metrics.registry.get_sample_value("entrabot_graph_malformed_items_total", {"kind": kind})
        or 0.0
    )


def test_malformed_items_are_skipped_logged_by_id_without_body_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = Metrics()
    payload = {
        "value": [
            message("m1"),
            message("m2", createdDateTime=None),  # missing required field
            message("m3", messageType="hologram"),  # unknown enum value
            message("m4", body={"contentType": "text", "content": 42}),  # wrong type
            "not even an object",
            message("m5"),
        ]
    }
    with caplog.at_level(logging.WARNING, logger="service.graph.pages"):
        page = parse_page(payload, ChatMessage, kind="chat message", metrics=metrics.graph)

    assert [m.id for m in page.items] == ["m1", "m5"]
    assert page.skipped == 4
    assert skipped_count(metrics, "chat message") == 4
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 4
    assert any("'m2'" in w for w in warnings) and any("'m3'" in w for w in warnings)
    assert all(SECRET_BODY not in w and "42" not in w for w in warnings)


@pytest.mark.parametrize(
    "payload",
    [
        [message("m1")],
        {"items": [message("m1")]},
        {"value": {"m1": message("m1")}},
        {"value": [message("m1")], "@odata.nextLink": 7},
        {"value": [message("m1")], "@odata.nextLink": ""},
    ],
    ids=["list-not-object", "no-value", "value-not-list", "nextlink-not-string", "nextlink-empty"],
)
def test_malformed_page_envelope_raises_a_payload_error(payload: object) -> None:
    with pytest.raises(GraphPayloadError):
        parse_page(payload, ChatMessage, kind="chat message", metrics=GraphMetrics())


def test_system_message_without_sender_is_recognised_as_system() -> None:
    page = parse_page(
        {
            "value": [
                message("s1", messageType="unknownFutureValue", **{"from": None}),
                message("h1"),
            ]
        },
        ChatMessage,
        kind="chat message",
        metrics=GraphMetrics(),
    )
    system, human = page.items
    assert system.is_system and system.sender is None
    assert not human.is_system
    assert human.sender is not None and human.sender.id == "u-1" and human.sender.kind == "user"


def test_an_unknown_user_identity_type_does_not_hide_a_human_message() -> None:
    raw = message(
        "m1",
        **{"from": {"user": {"id": "u-2", "displayName": None, "userIdentityType": "newKind"}}},
    )
    page = parse_page({"value": [raw]}, ChatMessage, kind="chat message", metrics=GraphMetrics())
    assert page.skipped == 0 and page.items[0].sender is not None
    assert page.items[0].sender.user_identity_type == "newKind"


def test_timestamps_are_utc_aware_even_without_an_offset() -> None:
    page = parse_page(
        {"value": [message("m1", lastModifiedDateTime="2026-11-20T10:00:01")]},
        ChatMessage,
        kind="chat message",
        metrics=GraphMetrics(),
    )
    item = page.items[0]
    assert item.last_modified_date_time == datetime(2026, 11, 20, 10, 0, 1, tzinfo=timezone.utc)
    assert item.created_date_time.tzinfo is not None


def test_mail_sender_and_recipients_are_unwrapped_from_email_address() -> None:
    raw = {
        "id": "AAMk1",
        "subject": "Hi",
        "from": {"emailAddress": {"address": "ada@contoso.com", "name": "Ada"}},
        "toRecipients": [{"emailAddress": {"address": "agent@contoso.com", "name": "Agent"}}],
        "receivedDateTime": "2026-11-20T10:00:00Z",
        "body": {"contentType": "HTML", "content": "<p>x</p>"},
        "bodyPreview": "x",
        "internetMessageId": "<abc@contoso.com>",
    }
    page = parse_page({"value": [raw]}, MailMessage, kind="mail", metrics=GraphMetrics())
    mail = page.items[0]
    assert mail.sender is not None and mail.sender.address == "ada@contoso.com"
    assert [r.address for r in mail.to_recipients] == ["agent@contoso.com"]
    assert mail.body.content_type == "html"


def test_chat_with_expanded_members_and_preview_is_read() -> None:
    raw = {
        "id": "19:c@thread.v2",
        "topic": None,
        "chatType": "oneOnOne",
        "members": [{"id": "mem1", "userId": "u-1", "displayName": "Ada", "roles": ["owner"]}],
        "lastMessagePreview": {
            "id": "m9",
            "createdDateTime": "2026-11-20T10:00:00Z",
            "messageType": "message",
            "isDeleted": False,
            "from": {"user": {"id": "u-1"}},
            "body": {"contentType": "text", "content": "hello"},
        },
    }
    chat = parse_page(
        {"value": [raw, {"id": "19:bad", "chatType": "broadcast"}]},
        Chat,
        kind="chat",
        metrics=GraphMetrics(),
    )
    assert chat.skipped == 1
    (item,) = chat.items
    assert item.members[0].user_id == "u-1"
    assert item.last_message_preview is not None and item.last_message_preview.id == "m9"


def test_a_repeated_mail_header_keeps_every_value_so_none_hides_behind_another() -> None:
    mail = MailMessage.model_validate(
        {
            "id": "m1",
            "receivedDateTime": "2026-11-20T12:00:00Z",
            "internetMessageHeaders": [
                {"name": "Auto-Submitted", "value": "no"},
                {"name": "auto-submitted", "value": "auto-generated"},
                {"name": "Received", "value": "from mx.example"},
            ],
        }
    )
    assert mail.headers == {"Auto-Submitted": "no, auto-generated", "Received": "from mx.example"}


def test_the_mail_select_names_every_property_the_model_reads() -> None:
    assert MailMessage.graph_select().split(",") == [
        "id",
        "subject",
        "from",
        "toRecipients",
        "ccRecipients",
        "receivedDateTime",
        "body",
        "bodyPreview",
        "internetMessageId",
        "internetMessageHeaders",
    ]

"""Graph's mail-out routes as documented: custom internet headers on sendMail, and reply, replyAll and
forward of a message with a comment, each 202 with a copy in Sent Items."""

from __future__ import annotations

from typing import Any

import httpx

from emulator import RunningEmulator
from emulator.seed import SeedUser
from tests.emulator.emulator_testkit import Entra, assert_graph_error, bearer


def _to(*addresses: str) -> list[dict[str, Any]]:
    return [{"emailAddress": {"address": a}} for a in addresses]


def _folder(
    emu: RunningEmulator,
    http: httpx.Client,
    headers: dict[str, str],
    folder: str,
    select: str = "subject,toRecipients,ccRecipients,body,conversationId,internetMessageHeaders",
) -> list[dict[str, Any]]:
    response = http.get(
        f"{emu.graph_url}/me/mailFolders/{folder}/messages",
        headers=headers,
        params={"$select": select},
    )
    assert response.status_code == 200, response.text
    return response.json()["value"]


def _person(emu: RunningEmulator, n: int) -> SeedUser:
    return emu.seed.humans[n]


def _ada_writes(
    emu: RunningEmulator, http: httpx.Client, entra: Entra, subject: str
) -> dict[str, str]:
    """Ada mails the agent and Grace, copying Alan; returns Ada's headers."""
    ada, grace, alan = (_person(emu, n) for n in range(3))
    headers = bearer(entra.human_token(ada.user_principal_name))
    response = http.post(
        f"{emu.graph_url}/me/sendMail",
        headers=headers,
        json={
            "message": {
                "subject": subject,
                "body": {"contentType": "Text", "content": "Can we ship <b>Friday</b>?"},
                "toRecipients": _to(
                    emu.seed.agent_user.user_principal_name, grace.user_principal_name
                ),
                "ccRecipients": _to(alan.user_principal_name),
            }
        },
    )
    assert response.status_code == 202, response.text
    return headers


def _agent_inbox_mail(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str], subject: str
) -> dict[str, Any]:
    (mail,) = [m for m in _folder(emu, http, agent, "inbox") if m["subject"] == subject]
    return mail


def test_custom_x_headers_travel_with_the_mail_and_stay_on_the_sent_copy(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str], entra: Entra
) -> None:
    ada = _person(emu, 0)
    response = http.post(
        f"{emu.graph_url}/me/sendMail",
        headers=agent,
        json={
            "message": {
                "subject": "Status",
                "body": {"contentType": "Text", "content": "Green."},
                "toRecipients": _to(ada.user_principal_name),
                "internetMessageHeaders": [{"name": "x-entrabot-send-id", "value": "abc123"}],
            }
        },
    )
    assert response.status_code == 202
    (sent,) = [m for m in _folder(emu, http, agent, "sentitems") if m["subject"] == "Status"]
    assert sent["internetMessageHeaders"] == [{"name": "x-entrabot-send-id", "value": "abc123"}]
    ada_headers = bearer(entra.human_token(ada.user_principal_name))
    (received,) = [m for m in _folder(emu, http, ada_headers, "inbox") if m["subject"] == "Status"]
    assert received["internetMessageHeaders"] == [{"name": "x-entrabot-send-id", "value": "abc123"}]


def test_a_header_that_is_not_an_x_header_is_refused_and_nothing_is_sent(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    response = http.post(
        f"{emu.graph_url}/me/sendMail",
        headers=agent,
        json={
            "message": {
                "subject": "Threaded",
                "toRecipients": _to("someone@example.org"),
                "internetMessageHeaders": [{"name": "In-Reply-To", "value": "<a@b>"}],
            }
        },
    )
    error = assert_graph_error(response, 400, "InvalidInternetMessageHeader")
    assert (
        error["message"]
        == "The internet message header name 'In-Reply-To' should start with 'x-' or 'X-'."
    )
    assert "Threaded" not in [m["subject"] for m in _folder(emu, http, agent, "sentitems")]


def test_reply_goes_to_the_sender_only_with_the_original_quoted(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str], entra: Entra
) -> None:
    ada_headers = _ada_writes(emu, http, entra, "Ship date")
    original = _agent_inbox_mail(emu, http, agent, "Ship date")
    response = http.post(
        f"{emu.graph_url}/me/messages/{original['id']}/reply",
        headers=agent,
        json={"comment": "Friday works <really>."},
    )
    assert response.status_code == 202 and response.content == b""
    (sent,) = [m for m in _folder(emu, http, agent, "sentitems") if m["subject"] == "RE: Ship date"]
    assert [r["emailAddress"]["address"] for r in sent["toRecipients"]] == [
        _person(emu, 0).user_principal_name
    ]
    assert sent["ccRecipients"] == [] and sent["conversationId"] == original["conversationId"]
    content = sent["body"]["content"]
    assert sent["body"]["contentType"] == "html"
    assert content.index("Friday works &lt;really&gt;.") < content.index(
        "Can we ship &lt;b&gt;Friday&lt;/b&gt;?"
    )
    assert "<b>Subject:</b> Ship date" in content
    assert "RE: Ship date" in [m["subject"] for m in _folder(emu, http, ada_headers, "inbox")]


def test_reply_all_goes_to_the_sender_and_every_other_recipient_but_the_replier(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str], entra: Entra
) -> None:
    ada, grace, alan = (_person(emu, n) for n in range(3))
    _ada_writes(emu, http, entra, "Release plan")
    original = _agent_inbox_mail(emu, http, agent, "Release plan")
    assert (
        http.post(
            f"{emu.graph_url}/me/messages/{original['id']}/replyAll",
            headers=agent,
            json={"comment": "Agreed."},
        ).status_code
        == 202
    )
    (sent,) = [
        m for m in _folder(emu, http, agent, "sentitems") if m["subject"] == "RE: Release plan"
    ]
    assert [r["emailAddress"]["address"] for r in sent["toRecipients"]] == [
        ada.user_principal_name,
        grace.user_principal_name,
    ]
    assert [r["emailAddress"]["address"] for r in sent["ccRecipients"]] == [
        alan.user_principal_name
    ]
    for person in (ada, grace, alan):
        inbox = _folder(emu, http, bearer(entra.human_token(person.user_principal_name)), "inbox")
        assert [m["subject"] for m in inbox].count("RE: Release plan") == 1, person.display_name


def test_forward_goes_to_the_given_recipients_and_keeps_custom_headers(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str], entra: Entra
) -> None:
    _ada_writes(emu, http, entra, "Invoice")
    original = _agent_inbox_mail(emu, http, agent, "Invoice")
    response = http.post(
        f"{emu.graph_url}/me/messages/{original['id']}/forward",
        headers=agent,
        json={
            "comment": "FYI",
            "toRecipients": _to("auditor@fabrikam.com"),
            "message": {"internetMessageHeaders": [{"name": "x-entrabot-send-id", "value": "fw1"}]},
        },
    )
    assert response.status_code == 202, response.text
    (sent,) = [m for m in _folder(emu, http, agent, "sentitems") if m["subject"] == "FW: Invoice"]
    assert [r["emailAddress"]["address"] for r in sent["toRecipients"]] == ["auditor@fabrikam.com"]
    assert sent["internetMessageHeaders"] == [{"name": "x-entrabot-send-id", "value": "fw1"}]
    assert sent["conversationId"] != original["conversationId"]


def test_forward_needs_its_recipients_in_exactly_one_place(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str], entra: Entra
) -> None:
    _ada_writes(emu, http, entra, "Twice")
    url = (
        f"{emu.graph_url}/me/messages/{_agent_inbox_mail(emu, http, agent, 'Twice')['id']}/forward"
    )
    neither = http.post(url, headers=agent, json={"comment": "x"})
    both = http.post(
        url,
        headers=agent,
        json={
            "comment": "x",
            "toRecipients": _to("a@example.org"),
            "message": {"toRecipients": _to("b@example.org")},
        },
    )
    for response in (neither, both):
        assert_graph_error(response, 400, "ErrorInvalidRecipients")
    assert "FW: Twice" not in [m["subject"] for m in _folder(emu, http, agent, "sentitems")]


def test_a_comment_and_a_message_body_together_are_400(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str], entra: Entra
) -> None:
    _ada_writes(emu, http, entra, "Both")
    url = f"{emu.graph_url}/me/messages/{_agent_inbox_mail(emu, http, agent, 'Both')['id']}/reply"
    response = http.post(
        url,
        headers=agent,
        json={"comment": "x", "message": {"body": {"contentType": "Text", "content": "y"}}},
    )
    assert_graph_error(response, 400, "ErrorInvalidRequest")


def test_replying_to_a_message_not_in_the_mailbox_is_404(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    response = http.post(
        f"{emu.graph_url}/me/messages/AAMkAnope/reply", headers=agent, json={"comment": "x"}
    )
    assert_graph_error(response, 404, "ErrorItemNotFound")


def test_a_reply_needs_mail_send(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str], entra: Entra
) -> None:
    _ada_writes(emu, http, entra, "Scopes")
    message_id = _agent_inbox_mail(emu, http, agent, "Scopes")["id"]
    read_only = bearer(entra.agent_token(scope="https://graph.microsoft.com/Mail.ReadWrite"))
    response = http.post(
        f"{emu.graph_url}/me/messages/{message_id}/reply", headers=read_only, json={"comment": "x"}
    )
    assert_graph_error(response, 403, "ErrorAccessDenied")

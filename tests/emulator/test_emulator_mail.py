"""Graph's mail routes: $top 1..1000, $filter and $orderby with the InefficientFilter rule, $skip
paging, folders, and sendMail delivering between tenant users."""

from __future__ import annotations

from datetime import timedelta

import httpx

from emulator import ManualClock, RunningEmulator
from emulator.timestamps import outlook_time
from tests.emulator.emulator_testkit import Entra, assert_graph_error, bearer


def _deliver(emu: RunningEmulator, http: httpx.Client, n: int, *, minutes_apart: int = 1) -> None:
    for k in range(n):
        r = http.post(
            emu.admin_url + "/mail",
            json={
                "to": emu.seed.agent_user.id,
                "from": "alerts@example.org",
                "subject": f"alert {k}",
                "body": f"<p>alert <b>{k}</b></p>",
                "content_type": "html",
                "received": f"-{(n - k) * minutes_apart}m",
            },
        )
        assert r.status_code == 201, r.text


def test_mail_top_above_1000_is_400(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    assert_graph_error(
        http.get(emu.graph_url + "/me/messages?$top=1001", headers=agent),
        400,
        "ErrorInvalidUrlQuery",
    )
    assert_graph_error(
        http.get(emu.graph_url + "/me/messages?$top=0", headers=agent), 400, "ErrorInvalidUrlQuery"
    )
    assert http.get(emu.graph_url + "/me/messages?$top=1000", headers=agent).status_code == 200


def test_orderby_property_missing_from_filter_is_inefficient_filter(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    query = "?$filter=isRead eq false&$orderby=receivedDateTime desc"
    error = assert_graph_error(
        http.get(emu.graph_url + "/me/messages" + query, headers=agent), 400, "InefficientFilter"
    )
    assert error["message"] == "The restriction or sort order is too complex for this operation."


def test_orderby_property_not_first_in_filter_is_inefficient_filter(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str], clock: ManualClock
) -> None:
    since = outlook_time(clock.now() - timedelta(days=1))
    query = (
        f"?$filter=isRead eq false and receivedDateTime ge {since}&$orderby=receivedDateTime desc"
    )
    assert_graph_error(
        http.get(emu.graph_url + "/me/messages" + query, headers=agent), 400, "InefficientFilter"
    )
    fixed = (
        f"?$filter=receivedDateTime ge {since} and isRead eq false&$orderby=receivedDateTime desc"
    )
    assert http.get(emu.graph_url + "/me/messages" + fixed, headers=agent).status_code == 200


def test_filter_on_received_time_with_orderby_returns_newer_mail_newest_first(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str], clock: ManualClock
) -> None:
    _deliver(emu, http, 5)
    since = outlook_time(clock.now() - timedelta(minutes=3, seconds=30))
    query = f"?$filter=receivedDateTime gt {since}&$orderby=receivedDateTime desc"
    subjects = [
        m["subject"]
        for m in http.get(
            emu.graph_url + "/me/mailFolders/inbox/messages" + query, headers=agent
        ).json()["value"]
    ]
    assert subjects == ["alert 4", "alert 3", "alert 2"]


def test_mail_pages_with_skip_next_link(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    _deliver(emu, http, 7)
    url = emu.graph_url + "/me/messages?$top=2&$select=subject,receivedDateTime"
    subjects: list[str] = []
    for _ in range(10):
        body = http.get(url, headers=agent).json()
        subjects += [m["subject"] for m in body["value"]]
        assert all(
            set(m) <= {"id", "@odata.etag", "subject", "receivedDateTime"} for m in body["value"]
        )
        next_link = body.get("@odata.nextLink")
        if next_link is None:
            break
        url = next_link
        assert url.startswith(emu.graph_url + "/me/messages?") and "$skip=" in url
    assert subjects == [f"alert {k}" for k in range(6, -1, -1)]


def test_send_mail_lands_in_the_recipients_inbox(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str], entra: Entra
) -> None:
    ada = emu.seed.humans[0]
    response = http.post(
        emu.graph_url + "/me/sendMail",
        headers=agent,
        json={
            "message": {
                "subject": "Weekly summary",
                "body": {"contentType": "Text", "content": "All green this week."},
                "toRecipients": [{"emailAddress": {"address": ada.user_principal_name}}],
            },
        },
    )
    assert response.status_code == 202 and response.content == b""
    inbox = http.get(
        emu.graph_url + "/me/mailFolders/inbox/messages",
        headers=bearer(entra.human_token(ada.user_principal_name)),
    ).json()["value"]
    (mail,) = [m for m in inbox if m["subject"] == "Weekly summary"]
    assert mail["from"]["emailAddress"]["address"] == emu.seed.agent_user.user_principal_name
    assert mail["sender"] == mail["from"] and mail["isRead"] is False
    assert mail["toRecipients"] == [
        {"emailAddress": {"name": ada.display_name, "address": ada.user_principal_name}}
    ]
    assert mail["bodyPreview"] == "All green this week." and mail["internetMessageId"].startswith(
        "<"
    )
    assert mail["receivedDateTime"].endswith("Z") and len(mail["id"]) > 100


def test_send_mail_property_names_match_in_any_case_as_graph_binds_them(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str], entra: Entra
) -> None:
    ada = emu.seed.humans[0]
    # The body exactly as Microsoft's Graph SDK for Python serializes SendMailPostRequestBody.
    response = http.post(
        emu.graph_url + "/me/sendMail",
        headers=agent,
        json={
            "Message": {
                "Subject": "From the SDK",
                "Body": {"ContentType": "Text", "Content": "PascalCase names."},
                "ToRecipients": [{"EmailAddress": {"Address": ada.user_principal_name}}],
            },
            "SaveToSentItems": False,
        },
    )
    assert response.status_code == 202
    inbox = http.get(
        emu.graph_url + "/me/mailFolders/inbox/messages",
        headers=bearer(entra.human_token(ada.user_principal_name)),
    ).json()["value"]
    (mail,) = [m for m in inbox if m["subject"] == "From the SDK"]
    assert mail["bodyPreview"] == "PascalCase names."
    sent = http.get(emu.graph_url + "/me/messages", headers=agent).json()["value"]
    assert "From the SDK" not in [m["subject"] for m in sent]  # SaveToSentItems: false was read too


def test_one_property_sent_in_two_cases_is_400(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    to = [{"emailAddress": {"address": "someone@example.org"}}]
    response = http.post(
        emu.graph_url + "/me/sendMail",
        headers=agent,
        json={
            "message": {"subject": "a", "toRecipients": to},
            "Message": {"subject": "b", "toRecipients": to},
        },
    )
    assert_graph_error(response, 400, "BadRequest")
    assert "'message' and 'Message'" in response.json()["error"]["message"]


def test_internet_message_headers_are_returned_only_when_selected(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    http.post(
        emu.admin_url + "/mail",
        json={
            "to": emu.seed.agent_user.id,
            "from": "news@fabrikam.com",
            "subject": "digest",
            "headers": {"Precedence": "bulk", "List-Unsubscribe": "<mailto:x@y>"},
        },
    )
    url = emu.graph_url + "/me/mailFolders/inbox/messages"
    (plain,) = [m for m in http.get(url, headers=agent).json()["value"] if m["subject"] == "digest"]
    assert "internetMessageHeaders" not in plain
    selected = http.get(
        url, headers=agent, params={"$select": "subject,internetMessageHeaders"}
    ).json()
    (mail,) = [m for m in selected["value"] if m["subject"] == "digest"]
    assert mail["internetMessageHeaders"] == [
        {"name": "Precedence", "value": "bulk"},
        {"name": "List-Unsubscribe", "value": "<mailto:x@y>"},
    ]


def test_sent_mail_is_in_me_messages_but_not_in_the_inbox(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    http.post(
        emu.graph_url + "/me/sendMail",
        headers=agent,
        json={
            "message": {
                "subject": "outbound",
                "toRecipients": [{"emailAddress": {"address": "someone@example.org"}}],
            }
        },
    )
    everything = http.get(emu.graph_url + "/me/messages", headers=agent).json()["value"]
    inbox = http.get(emu.graph_url + "/me/mailFolders/Inbox/messages", headers=agent).json()[
        "value"
    ]
    assert "outbound" in [m["subject"] for m in everything]
    assert "outbound" not in [m["subject"] for m in inbox]


def test_send_mail_without_recipients_is_400(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    response = http.post(
        emu.graph_url + "/me/sendMail", headers=agent, json={"message": {"subject": "x"}}
    )
    assert_graph_error(response, 400, "ErrorInvalidRecipients")


def test_send_mail_as_another_user_is_403(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    response = http.post(
        f"{emu.graph_url}/users/{emu.seed.humans[0].id}/sendMail",
        headers=agent,
        json={
            "message": {
                "subject": "x",
                "toRecipients": [{"emailAddress": {"address": "a@example.org"}}],
            }
        },
    )
    assert_graph_error(response, 403, "ErrorAccessDenied")
    mine = http.post(
        f"{emu.graph_url}/users/{emu.seed.agent_user.id}/sendMail",
        headers=agent,
        json={
            "message": {
                "subject": "x",
                "toRecipients": [{"emailAddress": {"address": "a@example.org"}}],
            }
        },
    )
    assert mine.status_code == 202


def test_get_message_by_id_and_unknown_id_is_404(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    _deliver(emu, http, 1)
    listed = http.get(emu.graph_url + "/me/messages?$top=1", headers=agent).json()["value"][0]
    fetched = http.get(f"{emu.graph_url}/me/messages/{listed['id']}", headers=agent).json()
    assert fetched["id"] == listed["id"] and fetched["body"]["contentType"] == "html"
    assert fetched["bodyPreview"] == "alert 0"
    assert_graph_error(
        http.get(emu.graph_url + "/me/messages/AAMkAnope", headers=agent), 404, "ErrorItemNotFound"
    )

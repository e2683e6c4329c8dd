"""Graph's chat-message rules: $top at most 50, descending order only, $filter only with $orderby on
the same property and only the operators Graph takes, paging, system messages hidden as
unknownFutureValue, Teams' message ids, and who may read and post."""

from __future__ import annotations

import threading
from datetime import timedelta

import httpx
from seed_ids import seeded_chat_id

from emulator import ManualClock, RunningEmulator
from emulator.timestamps import teams_time
from tests.emulator.emulator_testkit import Entra, assert_graph_error, bearer


def _url(emu: RunningEmulator, chat_id: str, query: str = "") -> str:
    return f"{emu.graph_url}/chats/{chat_id}/messages{query}"


def test_messages_top_above_50_is_400(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    chat = seeded_chat_id(emu.seed, 1)
    error = assert_graph_error(
        http.get(_url(emu, chat, "?$top=51"), headers=agent), 400, "BadRequest"
    )
    assert "The limit of '50' for Top query has been exceeded" in error["message"]
    assert http.get(_url(emu, chat, "?$top=50"), headers=agent).status_code == 200


def test_messages_orderby_ascending_is_400(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    chat = seeded_chat_id(emu.seed, 1)
    for order in ("createdDateTime asc", "lastModifiedDateTime", "lastModifiedDateTime asc"):
        error = assert_graph_error(
            http.get(_url(emu, chat, f"?$orderby={order}"), headers=agent), 400, "BadRequest"
        )
        assert "Ascending" in error["message"]


def test_messages_orderby_other_property_is_400(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    response = http.get(_url(emu, seeded_chat_id(emu.seed, 1), "?$orderby=id desc"), headers=agent)
    assert "QueryOptions to order by" in assert_graph_error(response, 400, "BadRequest")["message"]


def test_messages_come_newest_first_in_both_orders(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    chat = seeded_chat_id(emu.seed, 1)
    for order in ("", "?$orderby=lastModifiedDateTime desc", "?$orderby=createdDateTime desc"):
        ids = [m["id"] for m in http.get(_url(emu, chat, order), headers=agent).json()["value"]]
        assert ids == sorted(ids, key=int, reverse=True) and len(ids) == 3


def test_messages_filter_without_orderby_is_400(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str], clock: ManualClock
) -> None:
    since = teams_time(clock.now() - timedelta(hours=1))
    chat = seeded_chat_id(emu.seed, 1)
    response = http.get(_url(emu, chat, f"?$filter=lastModifiedDateTime gt {since}"), headers=agent)
    assert_graph_error(response, 400, "BadRequest")


def test_messages_filter_on_a_property_other_than_the_orderby_is_400(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str], clock: ManualClock
) -> None:
    since = teams_time(clock.now() - timedelta(hours=1))
    query = f"?$orderby=createdDateTime desc&$filter=lastModifiedDateTime gt {since}"
    assert_graph_error(
        http.get(_url(emu, seeded_chat_id(emu.seed, 1), query), headers=agent), 400, "BadRequest"
    )


def test_messages_filter_operators_graph_refuses_are_400(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str], clock: ManualClock
) -> None:
    since = teams_time(clock.now() - timedelta(hours=1))
    chat = seeded_chat_id(emu.seed, 1)
    for query in (
        f"?$orderby=createdDateTime desc&$filter=createdDateTime gt {since}",
        f"?$orderby=lastModifiedDateTime desc&$filter=lastModifiedDateTime ge {since}",
    ):
        error = assert_graph_error(
            http.get(_url(emu, chat, query), headers=agent), 400, "BadRequest"
        )
        assert "operationKind" in error["message"]


def test_messages_filter_on_last_modified_with_matching_orderby(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str], clock: ManualClock
) -> None:
    chat = seeded_chat_id(emu.seed, 1)
    newest_two = sorted(emu.state.messages(chat), key=lambda m: int(m.id))[-2:]
    since = teams_time(newest_two[0].created - timedelta(milliseconds=1))
    query = f"?$orderby=lastModifiedDateTime desc&$filter=lastModifiedDateTime gt {since}"
    ids = [m["id"] for m in http.get(_url(emu, chat, query), headers=agent).json()["value"]]
    assert ids == [newest_two[1].id, newest_two[0].id]
    before = teams_time(newest_two[1].created)
    query = f"?$orderby=createdDateTime desc&$filter=createdDateTime lt {before}"
    ids = [m["id"] for m in http.get(_url(emu, chat, query), headers=agent).json()["value"]]
    assert newest_two[1].id not in ids and newest_two[0].id in ids


def test_an_edited_old_message_reappears_to_a_last_modified_filter(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str], clock: ManualClock
) -> None:
    chat = seeded_chat_id(emu.seed, 1)
    oldest = min(emu.state.messages(chat), key=lambda m: int(m.id))
    watermark = teams_time(clock.now())
    clock.advance(5)
    http.patch(f"{emu.admin_url}/chats/{chat}/messages/{oldest.id}", json={"content": "edited"})
    query = f"?$orderby=lastModifiedDateTime desc&$filter=lastModifiedDateTime gt {watermark}"
    (message,) = http.get(_url(emu, chat, query), headers=agent).json()["value"]
    assert message["id"] == oldest.id and message["lastEditedDateTime"] is not None
    assert message["createdDateTime"] < watermark < message["lastModifiedDateTime"]


def test_messages_page_past_three_pages_with_next_link(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    seed = emu.seed
    chat = seeded_chat_id(seed, 1)
    for n in range(7):
        emu.state.post_message(chat, sender_id=seed.humans[0].id, content=f"burst {n}")
    url: str | None = _url(emu, chat, "?$top=3&$orderby=createdDateTime desc")
    seen, pages = [], 0
    while url is not None and pages < 10:
        body = http.get(url, headers=agent).json()
        seen += [m["id"] for m in body["value"]]
        url = body.get("@odata.nextLink")
        pages += 1
        assert url is None or url.startswith(emu.graph_url + f"/chats/{chat}/messages?")
    assert pages == 4 and len(seen) == len(set(seen)) == 10
    assert seen == sorted(seen, key=int, reverse=True)


def test_paging_does_not_repeat_when_messages_arrive_between_pages(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    chat = seeded_chat_id(emu.seed, 1)
    first = http.get(_url(emu, chat, "?$top=2"), headers=agent).json()
    emu.state.post_message(chat, sender_id=emu.seed.humans[0].id, content="arrived mid-sweep")
    second = http.get(first["@odata.nextLink"], headers=agent).json()
    ids = [m["id"] for m in first["value"] + second["value"]]
    assert len(ids) == len(set(ids)) == 3


def test_system_messages_read_as_unknown_future_value_without_prefer(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    chat = seeded_chat_id(emu.seed, 1)
    injected = http.post(
        f"{emu.admin_url}/chats/{chat}/messages",
        json={"message_type": "systemEventMessage", "from_user": emu.seed.humans[0].id},
    ).json()
    plain = http.get(_url(emu, chat), headers=agent).json()["value"]
    system = next(m for m in plain if m["id"] == injected["id"])
    assert system["messageType"] == "unknownFutureValue" and system["from"] is None
    assert system["eventDetail"]["@odata.type"] == "#microsoft.graph.membersAddedEventMessageDetail"
    preferred = http.get(
        _url(emu, chat), headers={**agent, "Prefer": "include-unknown-enum-members"}
    ).json()["value"]
    assert (
        next(m for m in preferred if m["id"] == injected["id"])["messageType"]
        == "systemEventMessage"
    )
    assert {m["messageType"] for m in plain if m["id"] != injected["id"]} == {"message"}


def test_creating_a_group_chat_posts_a_members_added_system_message(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    seed = emu.seed
    chat, _ = emu.state.create_chat(
        "group",
        [seed.agent_user.id, seed.humans[0].id, seed.humans[1].id],
        initiator=seed.agent_user.id,
    )
    (only,) = http.get(_url(emu, chat.id), headers=agent).json()["value"]
    assert only["messageType"] == "unknownFutureValue" and only["from"] is None


def test_non_member_cannot_read_or_post_and_unknown_chat_is_404(
    emu: RunningEmulator, http: httpx.Client, entra: Entra
) -> None:
    seed = emu.seed
    chat, _ = emu.state.create_chat(
        "oneOnOne", [seed.agent_user.id, seed.humans[0].id], chat_id=None
    )
    outsider = bearer(entra.human_token(seed.humans[2].user_principal_name))
    assert_graph_error(http.get(_url(emu, chat.id), headers=outsider), 403, "Forbidden")
    post = http.post(_url(emu, chat.id), json={"body": {"content": "let me in"}}, headers=outsider)
    assert_graph_error(post, 403, "Forbidden")
    assert_graph_error(
        http.get(_url(emu, "19:missing@thread.v2"), headers=outsider), 404, "NotFound"
    )


def test_post_message_as_the_token_user_identified_by_object_id(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    chat = seeded_chat_id(emu.seed, 1)
    response = http.post(
        _url(emu, chat), json={"body": {"contentType": "text", "content": "On it."}}, headers=agent
    )
    assert response.status_code == 201
    message = response.json()
    user = message["from"]["user"]
    assert (
        user["id"] == emu.seed.agent_user.id
        and user["displayName"] == emu.seed.agent_user.display_name
    )
    assert user["userIdentityType"] == "aadUser" and "userPrincipalName" not in user
    assert (
        message["body"] == {"contentType": "text", "content": "On it."}
        and message["chatId"] == chat
    )
    assert message["createdDateTime"].endswith("Z") and len(message["createdDateTime"]) == 24
    assert message["id"] == str(int(emu.state.messages(chat)[-1].created.timestamp() * 1000))


def test_post_message_without_content_is_400(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    response = http.post(
        _url(emu, seeded_chat_id(emu.seed, 1)), json={"body": {"content": ""}}, headers=agent
    )
    assert_graph_error(response, 400, "BadRequest")


def test_a_human_posts_with_their_own_token_and_the_agent_reads_it(
    emu: RunningEmulator, http: httpx.Client, ada: dict[str, str], agent: dict[str, str]
) -> None:
    chat = seeded_chat_id(emu.seed, 0)
    sent = http.post(
        _url(emu, chat), json={"body": {"content": "Status please"}}, headers=ada
    ).json()
    newest = http.get(_url(emu, chat, "?$top=1"), headers=agent).json()["value"][0]
    assert newest["id"] == sent["id"] and newest["from"]["user"]["id"] == emu.seed.humans[0].id


def test_burst_of_posts_in_one_millisecond_gets_unique_increasing_ids(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str], clock: ManualClock
) -> None:
    chat = seeded_chat_id(
        emu.seed, 1
    )  # the manual clock stands still: every post lands in the same millisecond
    ids: list[str] = []
    lock = threading.Lock()

    def post(n: int) -> None:
        with httpx.Client(timeout=10) as client:
            for k in range(4):
                r = client.post(
                    _url(emu, chat), json={"body": {"content": f"{n}-{k}"}}, headers=agent
                )
                assert r.status_code == 201, r.text
                with lock:
                    ids.append(r.json()["id"])

    threads = [threading.Thread(target=post, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ids) == len(set(ids)) == 16
    base = int(clock.now().timestamp() * 1000)
    assert sorted(int(i) for i in ids) == list(range(base, base + 16))


def test_a_mention_needs_its_at_tag_in_an_html_body(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    chat = seeded_chat_id(emu.seed, 1)
    ada = emu.seed.humans[0]
    mention = {
        "id": 0,
        "mentionText": ada.display_name,
        "mentioned": {"user": {"id": ada.id, "userIdentityType": "aadUser"}},
    }
    tagged = f'<at id="0">{ada.display_name}</at> please look'
    ok = http.post(
        _url(emu, chat),
        headers=agent,
        json={"body": {"contentType": "html", "content": tagged}, "mentions": [mention]},
    )
    assert ok.status_code == 201, ok.text
    [shown] = ok.json()["mentions"]
    assert shown["mentionText"] == ada.display_name and shown["mentioned"]["user"]["id"] == ada.id
    untagged = http.post(
        _url(emu, chat),
        headers=agent,
        json={"body": {"contentType": "html", "content": "hi"}, "mentions": [mention]},
    )
    assert_graph_error(untagged, 400, "BadRequest")
    as_text = http.post(
        _url(emu, chat),
        headers=agent,
        json={"body": {"contentType": "text", "content": tagged}, "mentions": [mention]},
    )
    assert_graph_error(as_text, 400, "BadRequest")


def test_a_card_attachment_must_be_placed_in_an_html_body(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    chat = seeded_chat_id(emu.seed, 1)
    card = {
        "id": "c1",
        "contentType": "application/vnd.microsoft.card.adaptive",
        "content": '{"type": "AdaptiveCard", "version": "1.5", "body": []}',
    }
    placed = {"contentType": "html", "content": '<attachment id="c1"></attachment>'}
    ok = http.post(_url(emu, chat), headers=agent, json={"body": placed, "attachments": [card]})
    assert ok.status_code == 201, ok.text
    assert ok.json()["attachments"][0]["content"] == card["content"]
    for body, attachments in (
        ({"contentType": "html", "content": "no placeholder"}, [card]),
        (placed, [{**card, "content": "{not json"}]),
        (placed, [{**card, "contentType": "application/pdf"}]),
    ):
        assert_graph_error(
            http.post(
                _url(emu, chat), headers=agent, json={"body": body, "attachments": attachments}
            ),
            400,
            "BadRequest",
        )

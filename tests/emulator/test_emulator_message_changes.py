"""Edits, reactions and soft deletes, made through the admin routes and read back through Graph's routes:
each moves lastModifiedDateTime (never createdDateTime), so an old message reappears to a
lastModifiedDateTime filter but keeps its place in createdDateTime order; a deleted message stays
listed with deletedDateTime set and its body emptied."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
from seed_ids import seeded_chat_id

from emulator import ManualClock, RunningEmulator
from emulator.timestamps import teams_time
from tests.emulator.emulator_testkit import assert_graph_error

NEWEST_BY_CREATION = "?$orderby=createdDateTime desc&$top=1"


def _messages(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str], chat: str, query: str = ""
) -> list[dict[str, Any]]:
    response = http.get(f"{emu.graph_url}/chats/{chat}/messages{query}", headers=agent)
    assert response.status_code == 200, response.text
    return list(response.json()["value"])


def _oldest(emu: RunningEmulator, chat: str) -> str:
    return min(emu.state.messages(chat), key=lambda m: int(m.id)).id


def _changed_since(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str], chat: str, watermark: str
) -> list[dict[str, Any]]:
    query = f"?$orderby=lastModifiedDateTime desc&$filter=lastModifiedDateTime gt {watermark}"
    return _messages(emu, http, agent, chat, query)


def test_a_reaction_moves_last_modified_but_not_created(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str], clock: ManualClock
) -> None:
    chat = seeded_chat_id(emu.seed, 1)
    oldest = _oldest(emu, chat)
    before = next(m for m in _messages(emu, http, agent, chat) if m["id"] == oldest)
    watermark = teams_time(clock.now())
    clock.advance(5)
    grace = emu.seed.humans[1]
    response = http.post(
        f"{emu.admin_url}/chats/{chat}/messages/{oldest}/reactions",
        json={"user": grace.user_principal_name, "reaction_type": "like"},
    )
    assert response.status_code == 201, response.text
    (message,) = _changed_since(emu, http, agent, chat, watermark)
    assert message["id"] == oldest and message["createdDateTime"] == before["createdDateTime"]
    assert message["createdDateTime"] < watermark < message["lastModifiedDateTime"]
    assert message["lastEditedDateTime"] is None  # a reaction is not an edit
    [reaction] = message["reactions"]
    assert reaction["reactionType"] == "like" and reaction["user"]["user"]["id"] == grace.id
    # createdDateTime order still puts the newest message first, not the one reacted to.
    assert _messages(emu, http, agent, chat, NEWEST_BY_CREATION)[0]["id"] != oldest


def test_a_soft_deleted_message_stays_listed_with_its_body_emptied(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str], clock: ManualClock
) -> None:
    chat = seeded_chat_id(emu.seed, 1)
    oldest = _oldest(emu, chat)
    watermark = teams_time(clock.now())
    clock.advance(5)
    assert http.delete(f"{emu.admin_url}/chats/{chat}/messages/{oldest}").status_code == 200
    listed = {m["id"]: m for m in _messages(emu, http, agent, chat)}
    deleted = listed[oldest]
    assert deleted["deletedDateTime"] is not None and deleted["body"]["content"] == ""
    assert deleted["createdDateTime"] < watermark < deleted["lastModifiedDateTime"]
    assert [m["id"] for m in _changed_since(emu, http, agent, chat, watermark)] == [oldest]
    assert len(listed) == len(emu.state.messages(chat))  # nothing disappears from the list


def test_an_edit_moves_last_modified_but_keeps_created_order(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str], clock: ManualClock
) -> None:
    chat = seeded_chat_id(emu.seed, 1)
    oldest = _oldest(emu, chat)
    clock.advance(5)
    response = http.patch(
        f"{emu.admin_url}/chats/{chat}/messages/{oldest}", json={"content": "edited"}
    )
    assert response.status_code == 200
    by_modified = [
        m["id"] for m in _messages(emu, http, agent, chat, "?$orderby=lastModifiedDateTime desc")
    ]
    by_created = [
        m["id"] for m in _messages(emu, http, agent, chat, "?$orderby=createdDateTime desc")
    ]
    assert by_modified[0] == oldest  # the edited message is the most recently modified one
    assert by_created == sorted(by_created, key=int, reverse=True) and by_created[-1] == oldest


def test_created_date_time_filters_only_with_lt(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str], clock: ManualClock
) -> None:
    chat = seeded_chat_id(emu.seed, 1)
    since = teams_time(clock.now() - timedelta(days=30))
    response = http.get(
        f"{emu.graph_url}/chats/{chat}/messages?$orderby=createdDateTime desc"
        f"&$filter=createdDateTime gt {since}",
        headers=agent,
    )
    assert_graph_error(response, 400, "BadRequest")


def test_reacting_needs_a_member_and_a_live_message(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    chat = seeded_chat_id(emu.seed, 1)
    seeded = emu.state.chat(chat)
    assert seeded is not None
    members = {m.user_id for m in seeded.members}
    outsider = next(u for u in emu.seed.users if u.id not in members)
    oldest = _oldest(emu, chat)
    url = f"{emu.admin_url}/chats/{chat}/messages/{oldest}/reactions"
    assert http.post(url, json={"user": outsider.id}).status_code == 403
    http.delete(f"{emu.admin_url}/chats/{chat}/messages/{oldest}")
    assert http.post(url, json={"user": emu.seed.humans[1].id}).status_code == 400
    assert (
        http.post(
            f"{emu.admin_url}/chats/{chat}/messages/1/reactions",
            json={"user": emu.seed.humans[1].id},
        ).status_code
        == 404
    )


def test_the_sender_alone_updates_or_soft_deletes_a_message_through_graphs_routes(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    chat = seeded_chat_id(emu.seed, 1)
    me = emu.seed.agent_user.id
    posted = http.post(
        f"{emu.graph_url}/chats/{chat}/messages",
        headers=agent,
        json={"body": {"contentType": "text", "content": "first draft"}},
    )
    assert posted.status_code == 201, posted.text
    mine, theirs = posted.json()["id"], _oldest(emu, chat)

    edit = {"body": {"contentType": "html", "content": "<p>second draft</p>"}}
    assert (
        http.patch(
            f"{emu.graph_url}/chats/{chat}/messages/{mine}", headers=agent, json=edit
        ).status_code
        == 204
    )
    (shown,) = [m for m in _messages(emu, http, agent, chat) if m["id"] == mine]
    assert (
        shown["body"] == {"contentType": "html", "content": "<p>second draft</p>"}
        and shown["lastEditedDateTime"]
    )
    assert_graph_error(
        http.patch(f"{emu.graph_url}/chats/{chat}/messages/{theirs}", headers=agent, json=edit),
        403,
        "Forbidden",
    )
    assert_graph_error(
        http.patch(
            f"{emu.graph_url}/chats/{chat}/messages/{mine}",
            headers=agent,
            json={**edit, "importance": "urgent"},
        ),
        400,
        "BadRequest",
    )

    delete = f"{emu.graph_url}/users/{me}/chats/{chat}/messages/{{}}/softDelete"
    assert_graph_error(http.post(delete.format(theirs), headers=agent), 403, "Forbidden")
    other_user = emu.seed.humans[0].id
    assert_graph_error(
        http.post(
            f"{emu.graph_url}/users/{other_user}/chats/{chat}/messages/{mine}/softDelete",
            headers=agent,
        ),
        403,
        "Forbidden",
    )
    assert http.post(delete.format(mine), headers=agent).status_code == 204
    (gone,) = [m for m in _messages(emu, http, agent, chat) if m["id"] == mine]
    assert gone["deletedDateTime"] and gone["body"]["content"] == ""
    assert (
        http.post(delete.format(mine), headers=agent).status_code == 204
    )  # again: still deleted, no error

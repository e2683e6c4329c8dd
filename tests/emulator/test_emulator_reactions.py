"""Graph's setReaction and unsetReaction on a chat message, over real HTTP: the signed-in user (the bearer
token's) reacts, once per type, the reaction moves lastModifiedDateTime and never createdDateTime, and the
request statistics count the route by its template."""

from __future__ import annotations

from typing import Any

import httpx
from seed_ids import seeded_chat_id

from emulator import ManualClock, RunningEmulator
from tests.emulator.emulator_testkit import Entra, assert_graph_error, bearer

SET_ROUTE = "POST /v1.0/chats/{id}/messages/{id}/setReaction"


def _message(
    emu: RunningEmulator, http: httpx.Client, headers: dict[str, str], chat: str, message_id: str
) -> dict[str, Any]:
    response = http.get(f"{emu.graph_url}/chats/{chat}/messages/{message_id}", headers=headers)
    assert response.status_code == 200, response.text
    return dict(response.json())


def _oldest(emu: RunningEmulator, chat: str) -> str:
    return min(emu.state.messages(chat), key=lambda m: int(m.id)).id


def _reactions(message: dict[str, Any]) -> list[tuple[str, str]]:
    return [(r["reactionType"], r["user"]["user"]["id"]) for r in message["reactions"]]


def test_set_reaction_reacts_as_the_signed_in_user_once_per_type(
    emu: RunningEmulator,
    http: httpx.Client,
    agent: dict[str, str],
    ada: dict[str, str],
    clock: ManualClock,
) -> None:
    chat, me = seeded_chat_id(emu.seed, 1), emu.seed.agent_user.id
    oldest = _oldest(emu, chat)
    before = _message(emu, http, agent, chat, oldest)
    url = f"{emu.graph_url}/chats/{chat}/messages/{oldest}/setReaction"
    clock.advance(5)

    response = http.post(url, headers=agent, json={"reactionType": "👀"})
    assert response.status_code == 204 and response.content == b""
    reacted = _message(emu, http, agent, chat, oldest)
    assert _reactions(reacted) == [("👀", me)]
    assert reacted["createdDateTime"] == before["createdDateTime"]
    assert reacted["lastModifiedDateTime"] > before["lastModifiedDateTime"]
    assert reacted["lastEditedDateTime"] is None  # a reaction is not an edit

    clock.advance(5)
    assert http.post(url, headers=agent, json={"reactionType": "👀"}).status_code == 204
    again = _message(emu, http, agent, chat, oldest)
    assert _reactions(again) == [("👀", me)], "one reaction of a type per user"
    assert again["lastModifiedDateTime"] == reacted["lastModifiedDateTime"], (
        "a repeat changes nothing"
    )

    assert http.post(url, headers=ada, json={"reactionType": "👀"}).status_code == 204
    assert _reactions(_message(emu, http, agent, chat, oldest)) == [
        ("👀", me),
        ("👀", emu.seed.humans[0].id),
    ]
    assert emu.stats.count(SET_ROUTE, 204) == 3


def test_unset_reaction_takes_back_only_the_callers_reaction(
    emu: RunningEmulator,
    http: httpx.Client,
    agent: dict[str, str],
    ada: dict[str, str],
    clock: ManualClock,
) -> None:
    chat = seeded_chat_id(emu.seed, 1)
    oldest = _oldest(emu, chat)
    base = f"{emu.graph_url}/chats/{chat}/messages/{oldest}"
    for headers in (agent, ada):
        assert (
            http.post(
                f"{base}/setReaction", headers=headers, json={"reactionType": "✅"}
            ).status_code
            == 204
        )
    reacted = _message(emu, http, agent, chat, oldest)
    clock.advance(5)

    assert (
        http.post(f"{base}/unsetReaction", headers=agent, json={"reactionType": "✅"}).status_code
        == 204
    )
    after = _message(emu, http, agent, chat, oldest)
    assert _reactions(after) == [("✅", emu.seed.humans[0].id)]
    assert after["lastModifiedDateTime"] > reacted["lastModifiedDateTime"]
    assert (
        http.post(f"{base}/unsetReaction", headers=agent, json={"reactionType": "✅"}).status_code
        == 204
    )


def test_a_reaction_needs_a_reaction_type_a_member_and_a_live_message(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str], entra: Entra
) -> None:
    chat = seeded_chat_id(emu.seed, 1)
    oldest = _oldest(emu, chat)
    url = f"{emu.graph_url}/chats/{chat}/messages/{oldest}/setReaction"
    assert_graph_error(http.post(url, headers=agent, json={}), 400, "BadRequest")
    assert_graph_error(http.post(url, headers=agent, json={"reactionType": " "}), 400, "BadRequest")
    assert_graph_error(
        http.post(url, json={"reactionType": "👀"}), 401, "InvalidAuthenticationToken"
    )
    assert (
        http.post(
            f"{emu.graph_url}/chats/{chat}/messages/1/setReaction",
            headers=agent,
            json={"reactionType": "👀"},
        ).status_code
        == 404
    )
    seeded = emu.state.chat(chat)
    assert seeded is not None
    outsider = next(u for u in emu.seed.humans if not seeded.has_member(u.id))
    assert_graph_error(
        http.post(
            url,
            headers=bearer(entra.human_token(outsider.user_principal_name)),
            json={"reactionType": "👀"},
        ),
        403,
        "Forbidden",
    )
    http.delete(f"{emu.admin_url}/chats/{chat}/messages/{oldest}")
    assert_graph_error(
        http.post(url, headers=agent, json={"reactionType": "👀"}), 400, "BadRequest"
    )

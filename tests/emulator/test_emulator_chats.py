"""Graph's chat routes: listing the signed-in user's chats ($top, $expand, paging, the one documented
$orderby and a tenant that refuses it),
creating chats (oneOnOne idempotent, group of three or more with the caller), members, access rules."""

from __future__ import annotations

import httpx
from cryptography.hazmat.primitives.asymmetric import rsa
from seed_ids import seeded_chat_id

from emulator import ManualClock, RunningEmulator, Seed, start_emulator
from tests.emulator.emulator_testkit import Entra, assert_graph_error, bearer

MEMBER = "#microsoft.graph.aadUserConversationMember"
ORDERED = "/me/chats?$orderby=lastMessagePreview/createdDateTime desc"


def _member(emu: RunningEmulator, user_id: str) -> dict:
    return {
        "@odata.type": MEMBER,
        "roles": ["owner"],
        "user@odata.bind": f"https://graph.microsoft.com/v1.0/users('{user_id}')",
    }


def _all_pages(http: httpx.Client, url: str, headers: dict[str, str]) -> list[list[dict]]:
    pages = []
    for _ in range(50):
        body = http.get(url, headers=headers).json()
        pages.append(body["value"])
        url = body.get("@odata.nextLink")
        if url is None:
            return pages
    raise AssertionError("nextLink never ended")


def test_list_chats_top_above_50_is_400(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    error = assert_graph_error(
        http.get(emu.graph_url + "/me/chats?$top=51", headers=agent), 400, "BadRequest"
    )
    assert "50" in error["message"]
    assert http.get(emu.graph_url + "/me/chats?$top=50", headers=agent).status_code == 200


def test_list_chats_refuses_any_other_orderby(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    response = http.get(
        emu.graph_url + "/me/chats?$orderby=lastUpdatedDateTime desc", headers=agent
    )
    error = assert_graph_error(response, 400, "BadRequest")
    assert (
        "QueryOptions to order by 'lastUpdatedDateTime desc' is not supported" in error["message"]
    )
    for ascending in (
        "lastMessagePreview/createdDateTime",
        "lastMessagePreview/createdDateTime asc",
    ):
        response = http.get(emu.graph_url + f"/me/chats?$orderby={ascending}", headers=agent)
        assert (
            "only ordering is 'lastMessagePreview/createdDateTime desc'"
            in assert_graph_error(response, 400, "BadRequest")["message"]
        )


def test_ordered_scan_lists_chats_by_newest_message_system_events_included(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    seed, clock = emu.seed, emu.clock
    assert isinstance(clock, ManualClock)
    agent_id, ada, grace, alan = seed.agent_user.id, *(h.id for h in seed.humans[:3])
    first_id, second_id, third_id = (c.id for c in seed.chats)
    assert first_id and second_id and third_id  # build_seed names every chat
    clock.advance(60)  # past the seeded history
    emu.state.post_message(third_id, sender_id=ada, content="second newest")
    clock.advance(10)
    emu.state.post_message(first_id, sender_id=ada, content="newest")
    empty, _ = emu.state.create_chat("oneOnOne", [agent_id, grace])  # no message at all
    url = emu.graph_url + ORDERED + "&$expand=lastMessagePreview&$top=2"
    chats = [c for page in _all_pages(http, url, agent) for c in page]
    assert [c["id"] for c in chats] == [first_id, third_id, second_id, empty.id]
    assert chats[-1]["lastMessagePreview"] is None
    assert chats[0]["lastMessagePreview"]["id"] == _last_id(emu, first_id)
    # A system event is a message too: adding a member moves the chat to the front.
    clock.advance(10)
    emu.state.add_member(second_id, alan, initiator=agent_id)
    first = http.get(url, headers=agent).json()["value"][0]
    assert first["id"] == second_id and first["lastMessagePreview"]["id"] == _last_id(
        emu, second_id
    )


def _last_id(emu: RunningEmulator, chat_id: str) -> str:
    last = emu.state.last_message(chat_id)
    assert last is not None
    return last.id


def test_last_message_preview_appears_only_when_expanded(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    for url in ("/me/chats", ORDERED):
        assert all(
            "lastMessagePreview" not in c
            for c in http.get(emu.graph_url + url, headers=agent).json()["value"]
        )


def test_a_tenant_that_refuses_the_ordering_answers_400(
    seed: Seed, signing_key: rsa.RSAPrivateKey, http: httpx.Client
) -> None:
    refusing = Seed.model_validate({**seed.model_dump(), "chats_orderby": "refused"})
    with start_emulator(refusing, signing_key=signing_key) as emu:
        agent = bearer(Entra(emu, http).agent_token())
        assert_graph_error(http.get(emu.graph_url + ORDERED, headers=agent), 400, "BadRequest")
        assert (
            http.get(
                emu.graph_url + "/me/chats?$expand=lastMessagePreview", headers=agent
            ).status_code
            == 200
        )


def test_list_chats_pages_past_three_pages_with_next_link(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    seed = emu.seed
    for n in range(5):  # 3 seeded + 5 = 8 chats; $top=2 gives four pages
        emu.state.create_chat(
            "group", [seed.agent_user.id, seed.humans[0].id, seed.humans[1].id], topic=f"x{n}"
        )
    pages = _all_pages(http, emu.graph_url + "/me/chats?$top=2", agent)
    ids = [c["id"] for page in pages for c in page]
    assert len(pages) == 4 and all(len(p) == 2 for p in pages)
    assert len(ids) == len(set(ids)) == 8
    assert set(ids) == {c.id for c in emu.state.chats_of(seed.agent_user.id)}


def test_next_link_is_on_the_graph_host_and_keeps_the_query(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    body = http.get(emu.graph_url + "/me/chats?$top=1&$expand=members", headers=agent).json()
    link = body["@odata.nextLink"]
    assert (
        link.startswith(emu.graph_url + "/me/chats?")
        and "$skiptoken=" in link
        and "$expand=members" in link
    )
    assert "members" in http.get(link, headers=agent).json()["value"][0]


def test_list_chats_expands_members_and_last_message_preview(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    body = http.get(
        emu.graph_url + "/me/chats?$expand=members,lastMessagePreview", headers=agent
    ).json()
    chat = next(c for c in body["value"] if c["id"] == emu.seed.chats[1].id)
    assert {m["userId"] for m in chat["members"]} == set(emu.seed.chats[1].members)
    assert chat["members"][0]["@odata.type"] == MEMBER
    preview = chat["lastMessagePreview"]
    newest = emu.state.last_message(chat["id"])
    assert newest is not None and newest.sender is not None
    assert preview["id"] == newest.id and preview["from"]["user"]["id"] == newest.sender.user_id
    assert "members" not in http.get(emu.graph_url + "/me/chats", headers=agent).json()["value"][0]


def test_list_chats_unknown_expand_is_400(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    assert_graph_error(
        http.get(emu.graph_url + "/me/chats?$expand=messages", headers=agent), 400, "BadRequest"
    )


def test_one_on_one_chat_creation_is_idempotent(
    emu: RunningEmulator, http: httpx.Client, entra: Entra, agent: dict[str, str]
) -> None:
    seed = emu.seed
    grace = seed.humans[1]
    body = {
        "chatType": "oneOnOne",
        "members": [_member(emu, seed.agent_user.id), _member(emu, grace.id)],
    }
    first = http.post(emu.graph_url + "/chats", json=body, headers=agent)
    again = http.post(emu.graph_url + "/chats", json=body, headers=agent)
    # The same two people asking from the other side get the same chat.
    from_grace = http.post(
        emu.graph_url + "/chats",
        json=body,
        headers=bearer(entra.human_token(grace.user_principal_name)),
    )
    assert first.status_code == 201 and first.json()["chatType"] == "oneOnOne"
    assert first.json()["id"] == again.json()["id"] == from_grace.json()["id"]


def test_group_chat_needs_three_members(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    seed = emu.seed
    two = {
        "chatType": "group",
        "members": [_member(emu, seed.agent_user.id), _member(emu, seed.humans[0].id)],
    }
    assert_graph_error(
        http.post(emu.graph_url + "/chats", json=two, headers=agent), 400, "BadRequest"
    )
    three = {
        "chatType": "group",
        "topic": "Launch",
        "members": [
            _member(emu, seed.agent_user.id),
            _member(emu, seed.humans[0].id),
            _member(emu, seed.humans[1].id),
        ],
    }
    created = http.post(emu.graph_url + "/chats", json=three, headers=agent)
    assert created.status_code == 201 and created.json()["topic"] == "Launch"
    assert created.json()["id"].endswith("@thread.v2")


def test_created_chat_must_include_the_caller(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    seed = emu.seed
    body = {
        "chatType": "oneOnOne",
        "members": [_member(emu, seed.humans[0].id), _member(emu, seed.humans[1].id)],
    }
    assert_graph_error(
        http.post(emu.graph_url + "/chats", json=body, headers=agent), 400, "BadRequest"
    )


def test_member_needs_the_odata_type_and_a_user_binding(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    seed = emu.seed
    body = {
        "chatType": "oneOnOne",
        "members": [
            _member(emu, seed.agent_user.id),
            {"roles": ["owner"], "userId": seed.humans[0].id},
        ],
    }
    assert_graph_error(
        http.post(emu.graph_url + "/chats", json=body, headers=agent), 400, "BadRequest"
    )


def test_get_chat_for_a_non_member_is_403_and_unknown_chat_is_404(
    emu: RunningEmulator, http: httpx.Client, entra: Entra
) -> None:
    seed = emu.seed
    private, _ = emu.state.create_chat("oneOnOne", [seed.agent_user.id, seed.humans[1].id])
    outsider = bearer(entra.human_token(seed.humans[2].user_principal_name))
    assert_graph_error(
        http.get(f"{emu.graph_url}/chats/{private.id}", headers=outsider), 403, "Forbidden"
    )
    assert_graph_error(
        http.get(f"{emu.graph_url}/chats/19:nope@thread.v2", headers=outsider), 404, "NotFound"
    )


def test_members_list_and_add_to_a_group_chat(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    seed = emu.seed
    chat_id = seeded_chat_id(seed, 1)
    before = http.get(f"{emu.graph_url}/chats/{chat_id}/members", headers=agent).json()["value"]
    newcomer = next(u for u in seed.humans if u.id not in {m["userId"] for m in before})
    added = http.post(
        f"{emu.graph_url}/chats/{chat_id}/members", json=_member(emu, newcomer.id), headers=agent
    )
    assert added.status_code == 201 and added.json()["userId"] == newcomer.id
    after = http.get(f"{emu.graph_url}/chats/{chat_id}/members", headers=agent).json()["value"]
    assert len(after) == len(before) + 1


def test_members_cannot_be_added_to_a_one_on_one_chat(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    chat_id = seeded_chat_id(emu.seed, 0)
    body = _member(emu, emu.seed.humans[2].id)
    assert_graph_error(
        http.post(f"{emu.graph_url}/chats/{chat_id}/members", json=body, headers=agent),
        400,
        "BadRequest",
    )


def test_unknown_graph_segment_is_400(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    error = assert_graph_error(
        http.get(emu.graph_url + "/me/teleporters", headers=agent), 400, "BadRequest"
    )
    assert "teleporters" in error["message"]

"""Conformance: Teams teams, channels and channel messages as Graph serves them (emulator.team_state and
its routes): who sees what, the shapes and contexts, $top and paging, posting as the signed-in user, the
reply that touches its root, delta tokens, change notifications for a root and a reply, and the Teams
limits, over real HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from emulator import ManualClock, ManualMonotonic, RunningEmulator, Seed, start_emulator
from tests.emulator.emulator_testkit import Entra, assert_graph_error, bearer
from tests.emulator.notification_receiver import Receiver
from tests.emulator.subscription_kit import FAST, Subscriber, entra_app_token, receiver  # noqa: F401

TEAM = "7d1c0b8e-0000-4000-8000-00000000e001"


def with_teams(seed: Seed) -> Seed:
    """The conformance tenant plus one team: Ada (owner), Grace and the agent; General, a standard
    channel with a thread, and a private channel of Ada's alone. Alan is in no team."""
    ada, grace, _ = seed.humans
    data = seed.model_dump()
    data["subscriptions"] = FAST.model_dump()
    data["agent_identities"][0]["app_roles"] = ["ChannelMessage.Read.All"]
    data["teams"] = [
        {
            "id": TEAM,
            "display_name": "Engineering",
            "description": "Builds things",
            "members": [ada.id, grace.id, seed.agent_user.id],
            "owners": [ada.id],
            "channels": [
                {
                    "display_name": "Ops",
                    "messages": [
                        {
                            "from_user": ada.id,
                            "content": "deploy at noon?",
                            "created": "-2h",
                            "replies": [
                                {"from_user": grace.id, "content": "yes", "created": "-1h"}
                            ],
                        }
                    ],
                },
                {"display_name": "Secret", "membership_type": "private", "members": [ada.id]},
            ],
        }
    ]
    return Seed.model_validate(data)


@pytest.fixture
def emu(
    seed: Seed, clock: ManualClock, signing_key: rsa.RSAPrivateKey
) -> Iterator[RunningEmulator]:
    with start_emulator(with_teams(seed), clock=clock, signing_key=signing_key) as running:
        yield running


def _get(http: httpx.Client, emu: RunningEmulator, path: str, headers: dict[str, str]) -> Any:
    response = http.get(emu.graph_url + path, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


def _channel(http: httpx.Client, emu: RunningEmulator, name: str, headers: dict[str, str]) -> str:
    channels = _get(http, emu, f"/teams/{TEAM}/channels", headers)["value"]
    return next(c["id"] for c in channels if c["displayName"] == name)


def _post(
    http: httpx.Client, url: str, headers: dict[str, str], content: str, **extra: Any
) -> dict[str, Any]:
    response = http.post(url, headers=headers, json={"body": {"content": content}, **extra})
    assert response.status_code == 201, response.text
    return response.json()


# --- teams and channels ---------------------------------------------------------------------


def test_joined_teams_name_each_team_by_id_display_name_and_description(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    body = _get(http, emu, "/me/joinedTeams", agent)
    assert body["@odata.context"].endswith("/$metadata#teams")
    assert body["value"] == [
        {"id": TEAM, "displayName": "Engineering", "description": "Builds things"}
    ]
    mine = _get(http, emu, f"/users/{emu.seed.agent_user.id}/joinedTeams", agent)["value"]
    assert [t["id"] for t in mine] == [TEAM]


def test_a_delegated_token_lists_only_its_own_users_joined_teams(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    ada = emu.seed.humans[0]
    response = http.get(f"{emu.graph_url}/users/{ada.id}/joinedTeams", headers=agent)
    assert_graph_error(response, 403, "Forbidden")


def test_a_team_and_its_channels_carry_graphs_contexts_and_the_general_channel(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    team = _get(http, emu, f"/teams/{TEAM}", agent)
    assert team["@odata.context"].endswith("/$metadata#teams/$entity")
    assert team["displayName"] == "Engineering" and team["tenantId"] == emu.seed.tenant_id
    channels = _get(http, emu, f"/teams/{TEAM}/channels", agent)
    assert channels["@odata.context"].endswith(f"/$metadata#teams('{TEAM}')/channels")
    assert [(c["displayName"], c["membershipType"]) for c in channels["value"]] == [
        ("General", "standard"),
        ("Ops", "standard"),
    ]  # the private channel of Ada's alone is hidden from the agent
    ops = channels["value"][1]["id"]
    one = _get(http, emu, f"/teams/{TEAM}/channels/{ops}", agent)
    assert one["@odata.context"].endswith(f"/$metadata#teams('{TEAM}')/channels/$entity")
    every = _get(http, emu, f"/teams/{TEAM}/allChannels", agent)["value"]
    assert all(c["@odata.id"].endswith(f"channels('{c['id']}')") for c in every)


def test_a_private_channel_is_listed_for_its_members_only(
    emu: RunningEmulator, http: httpx.Client, ada: dict[str, str], agent: dict[str, str]
) -> None:
    secret = _channel(http, emu, "Secret", ada)
    response = http.get(f"{emu.graph_url}/teams/{TEAM}/channels/{secret}/messages", headers=agent)
    assert_graph_error(response, 403, "Forbidden")


def test_someone_outside_the_team_gets_403_and_an_unknown_team_404(
    emu: RunningEmulator, http: httpx.Client, entra: Entra, agent: dict[str, str]
) -> None:
    alan = bearer(entra.human_token(emu.seed.humans[2].user_principal_name))
    ops = _channel(http, emu, "Ops", agent)
    for path in (
        f"/teams/{TEAM}",
        f"/teams/{TEAM}/channels",
        f"/teams/{TEAM}/channels/{ops}/messages",
    ):
        assert_graph_error(http.get(emu.graph_url + path, headers=alan), 403, "Forbidden")
    unknown = http.get(f"{emu.graph_url}/teams/00000000-0000-0000-0000-000000000000", headers=agent)
    assert_graph_error(unknown, 404, "NotFound")


def test_a_channel_added_after_start_is_listed_and_a_member_added_sees_the_team(
    emu: RunningEmulator, http: httpx.Client, entra: Entra, agent: dict[str, str]
) -> None:
    added = http.post(f"{emu.admin_url}/teams/{TEAM}/channels", json={"display_name": "Launch"})
    assert added.status_code == 201, added.text
    names = [c["displayName"] for c in _get(http, emu, f"/teams/{TEAM}/channels", agent)["value"]]
    assert names == ["General", "Ops", "Launch"]
    alan = emu.seed.humans[2]
    assert http.post(f"{emu.admin_url}/teams/{TEAM}/members", json={"user": alan.id}).is_success
    alans = bearer(entra.human_token(alan.user_principal_name))
    assert [t["id"] for t in _get(http, emu, "/me/joinedTeams", alans)["value"]] == [TEAM]
    assert http.delete(f"{emu.admin_url}/teams/{TEAM}/members/{alan.id}").is_success
    assert _get(http, emu, "/me/joinedTeams", alans)["value"] == []


def test_reading_teams_needs_the_documented_scopes(
    emu: RunningEmulator, http: httpx.Client, entra: Entra
) -> None:
    ada = emu.seed.humans[0]
    narrow = bearer(entra.human_token(ada.user_principal_name, scope="User.Read"))
    for path in ("/me/joinedTeams", f"/teams/{TEAM}", f"/teams/{TEAM}/channels"):
        error = assert_graph_error(http.get(emu.graph_url + path, headers=narrow), 403, "Forbidden")
        assert "Missing scope permissions" in error["message"]


# --- channel messages -----------------------------------------------------------------------


def test_channel_messages_list_roots_only_and_expand_their_replies(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    ops = _channel(http, emu, "Ops", agent)
    plain = _get(http, emu, f"/teams/{TEAM}/channels/{ops}/messages", agent)
    [root] = plain["value"]
    assert "replies" not in root and root["replyToId"] is None and root["chatId"] is None
    assert root["channelIdentity"] == {"teamId": TEAM, "channelId": ops}
    expanded = _get(http, emu, f"/teams/{TEAM}/channels/{ops}/messages?$expand=replies", agent)
    [reply] = expanded["value"][0]["replies"]
    assert reply["replyToId"] == root["id"] and reply["body"]["content"] == "yes"
    one = _get(
        http,
        emu,
        f"/teams/{TEAM}/channels/{ops}/messages/{root['id']}/replies/{reply['id']}",
        agent,
    )
    assert one["@odata.context"].endswith(f"messages('{root['id']}')/replies/$entity")
    missing = http.get(
        f"{emu.graph_url}/teams/{TEAM}/channels/{ops}/messages/{reply['id']}", headers=agent
    )
    assert_graph_error(missing, 404, "NotFound")  # a reply is not a root


def test_top_is_at_most_50_and_pages_follow_their_next_links(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    ops = _channel(http, emu, "Ops", agent)
    base = f"/teams/{TEAM}/channels/{ops}/messages"
    for path in (
        base + "?$top=51",
        f"{base}/{_get(http, emu, base, agent)['value'][0]['id']}/replies?$top=51",
    ):
        error = assert_graph_error(http.get(emu.graph_url + path, headers=agent), 400, "BadRequest")
        assert "limit of '50'" in error["message"]
    for n in range(4):
        _post(http, emu.graph_url + base, agent, f"note {n}")
    seen: list[str] = []
    url = emu.graph_url + base + "?$top=2"
    while url:
        page = http.get(url, headers=agent).json()
        seen.extend(m["body"]["content"] for m in page["value"])
        url = page.get("@odata.nextLink")
    assert seen == ["note 3", "note 2", "note 1", "note 0", "deploy at noon?"]


def test_the_signed_in_user_posts_a_root_and_a_reply_with_a_mention(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    ops = _channel(http, emu, "Ops", agent)
    base = f"{emu.graph_url}/teams/{TEAM}/channels/{ops}/messages"
    root = _post(http, base, agent, "status update")
    assert root["from"]["user"]["id"] == emu.seed.agent_user.id
    assert root["@odata.context"].endswith(f"channels('{ops}')/messages/$entity")
    ada = emu.seed.humans[0]
    mention = {"id": 0, "mentionText": "Ada", "mentioned": {"user": {"id": ada.id}}}
    reply = http.post(
        f"{base}/{root['id']}/replies",
        headers=agent,
        json={
            "body": {"contentType": "html", "content": '<at id="0">Ada</at> done'},
            "mentions": [mention],
        },
    )
    assert reply.status_code == 201, reply.text
    assert reply.json()["replyToId"] == root["id"]
    assert reply.json()["mentions"][0]["mentioned"]["user"]["id"] == ada.id


def test_an_app_only_token_cannot_post_and_a_reply_to_a_reply_is_refused(
    emu: RunningEmulator, http: httpx.Client, entra: Entra, agent: dict[str, str]
) -> None:
    ops = _channel(http, emu, "Ops", agent)
    base = f"{emu.graph_url}/teams/{TEAM}/channels/{ops}/messages"
    app = bearer(entra_app_token(entra))
    response = http.post(base, headers=app, json={"body": {"content": "hi"}})
    assert "application-only" in assert_graph_error(response, 403, "Forbidden")["message"]
    root = _get(http, emu, f"/teams/{TEAM}/channels/{ops}/messages?$expand=replies", agent)[
        "value"
    ][0]
    nested = http.post(
        f"{base}/{root['replies'][0]['id']}/replies", headers=agent, json={"body": {"content": "x"}}
    )
    assert_graph_error(nested, 400, "BadRequest")


def test_a_reply_moves_its_roots_last_modified_so_the_delta_filter_finds_the_chain(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str], clock: ManualClock
) -> None:
    ops = _channel(http, emu, "Ops", agent)
    base = f"/teams/{TEAM}/channels/{ops}/messages"
    root = _get(http, emu, base, agent)["value"][0]
    since = emu.clock.now().isoformat().replace("+00:00", "Z")
    clock.advance(5)
    reply = _post(http, f"{emu.graph_url}{base}/{root['id']}/replies", agent, "late reply")
    touched = _get(http, emu, f"{base}/{root['id']}", agent)
    assert touched["lastModifiedDateTime"] == reply["createdDateTime"]
    assert touched["createdDateTime"] == root["createdDateTime"]
    delta = _get(
        http, emu, f"{base}/delta?$filter=lastModifiedDateTime gt {since}&$expand=replies", agent
    )
    [chain] = delta["value"]
    assert chain["@odata.type"] == "#microsoft.graph.chatMessage"
    assert [r["body"]["content"] for r in chain["replies"]] == ["late reply", "yes"]


def test_a_delta_round_pages_then_its_delta_link_returns_only_what_changed_since(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    ops = _channel(http, emu, "Ops", agent)
    base = f"/teams/{TEAM}/channels/{ops}/messages"
    for n in range(2):
        _post(http, emu.graph_url + base, agent, f"new {n}")
    first = _get(http, emu, base + "/delta?$top=2", agent)
    assert first["@odata.context"].endswith("/$metadata#Collection(chatMessage)")
    second = http.get(first["@odata.nextLink"], headers=agent).json()
    assert "@odata.nextLink" not in second
    contents = [m["body"]["content"] for m in first["value"] + second["value"]]
    assert contents == ["deploy at noon?", "new 0", "new 1"]
    assert _get_link(http, second["@odata.deltaLink"], agent)["value"] == []
    _post(http, emu.graph_url + base, agent, "after the round")
    later = _get_link(http, second["@odata.deltaLink"], agent)
    assert [m["body"]["content"] for m in later["value"]] == ["after the round"]


def _get_link(http: httpx.Client, url: str, headers: dict[str, str]) -> Any:
    response = http.get(url, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


def test_delta_takes_only_lastmodified_gt_and_no_new_options_beside_a_token(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    ops = _channel(http, emu, "Ops", agent)
    delta = f"{emu.graph_url}/teams/{TEAM}/channels/{ops}/messages/delta"
    refused = http.get(delta + "?$filter=createdDateTime gt 2026-01-01T00:00:00Z", headers=agent)
    assert_graph_error(refused, 400, "BadRequest")
    link = _get_link(http, delta, agent)["@odata.deltaLink"]
    assert_graph_error(http.get(link + "&$top=5", headers=agent), 400, "BadRequest")
    assert_graph_error(http.get(delta + "?$top=51", headers=agent), 400, "BadRequest")


# --- change notifications -------------------------------------------------------------------


def test_a_channel_subscription_notifies_a_root_and_a_reply_by_their_graph_paths(
    emu: RunningEmulator,
    http: httpx.Client,
    agent: dict[str, str],
    ada: dict[str, str],
    receiver: Receiver,
) -> None:
    ops = _channel(http, emu, "Ops", agent)
    Subscriber(emu, http, agent).created(f"/teams/{TEAM}/channels/{ops}/messages", receiver.url())
    base = f"{emu.graph_url}/teams/{TEAM}/channels/{ops}/messages"
    root = _post(http, base, ada, "new thread")
    reply = _post(http, f"{base}/{root['id']}/replies", ada, "first reply")
    receiver.wait_for(lambda: len(receiver.notifications()) == 2, "a root and a reply")
    resources = sorted(n["resource"] for n in receiver.notifications())
    messages = f"teams('{TEAM}')/channels('{ops}')/messages"
    assert resources == [
        f"{messages}('{root['id']}')",
        f"{messages}('{root['id']}')/replies('{reply['id']}')",
    ]
    assert {n["resourceData"]["@odata.id"] for n in receiver.notifications()} == set(resources)


def test_channel_subscriptions_need_channel_message_read_and_all_messages_of_a_team_is_app_only(
    emu: RunningEmulator,
    http: httpx.Client,
    entra: Entra,
    agent: dict[str, str],
    receiver: Receiver,
) -> None:
    delegated = Subscriber(emu, http, agent)
    refused = delegated.create(f"/teams/{TEAM}/channels/getAllMessages", receiver.url())
    assert_graph_error(refused, 403, "ExtensionError")
    app = Subscriber(emu, http, bearer(entra_app_token(entra)))
    app.created(f"/teams/{TEAM}/channels/getAllMessages", receiver.url())
    ada = emu.seed.humans[0]
    narrow = Subscriber(
        emu, http, bearer(entra.human_token(ada.user_principal_name, scope="User.Read"))
    )
    ops = _channel(http, emu, "Ops", agent)
    assert_graph_error(
        narrow.create(f"/teams/{TEAM}/channels/{ops}/messages", receiver.url()),
        403,
        "ExtensionError",
    )
    too_long = delegated.create(
        f"/teams/{TEAM}/channels/{ops}/messages", receiver.url(), minutes=4321
    )
    assert_graph_error(too_long, 400, "InvalidRequest")


# --- limits ---------------------------------------------------------------------------------


def test_a_channel_takes_4_requests_a_second_per_app(
    seed: Seed, signing_key: rsa.RSAPrivateKey, http: httpx.Client
) -> None:
    data = with_teams(seed).model_dump()
    data["throttle"] = {"enabled": True}
    ticks = ManualMonotonic()
    with start_emulator(
        Seed.model_validate(data),
        signing_key=signing_key,
        throttle_clock=ticks,
        fractional_retry_after=True,
    ) as emu:
        agent = bearer(Entra(emu, http).agent_token())
        ops = _channel(http, emu, "Ops", agent)
        url = f"{emu.graph_url}/teams/{TEAM}/channels/{ops}/messages"
        codes = [http.get(url, headers=agent).status_code for _ in range(5)]
        assert codes == [200, 200, 200, 200, 429]
        ticks.advance(1.0)
        assert http.get(url, headers=agent).status_code == 200
        limits = http.get(emu.admin_url + "/throttle").json()["limits"]
        assert limits["channel_message_reads"]["requests"] == 20
        assert limits["channel_message_sends"]["requests"] == 50
        assert limits["per_team_or_channel"]["throttled"] == 1

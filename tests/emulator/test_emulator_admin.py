"""Throttling (per app, 429 with Retry-After), and the admin API: faults (before and after commit,
by route, counted), forced throttle bursts, request statistics by route template, direct injection."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from seed_ids import seeded_chat_id

from emulator import ManualClock, RunningEmulator, ThrottleBudget, build_seed, start_emulator
from tests.emulator.emulator_testkit import Entra, assert_graph_error, bearer


@pytest.fixture
def tight(signing_key: rsa.RSAPrivateKey) -> Iterator[RunningEmulator]:
    """A tenant with a budget small enough to exceed in a handful of requests."""
    seed = build_seed(
        chats=2, throttle=ThrottleBudget(chat_messages_per_s=2, other_per_s=3, per_chat_per_s=None)
    )
    with start_emulator(seed, signing_key=signing_key) as running:
        yield running


def test_exceeding_the_chat_message_budget_is_429_with_retry_after(
    tight: RunningEmulator, http: httpx.Client
) -> None:
    headers = bearer(Entra(tight, http).agent_token())
    url = f"{tight.graph_url}/chats/{tight.seed.chats[0].id}/messages"
    responses = [http.get(url, headers=headers) for _ in range(8)]
    throttled = [r for r in responses if r.status_code == 429]
    assert throttled and responses[0].status_code == 200
    error = assert_graph_error(throttled[0], 429, "TooManyRequests")
    assert 0 < float(throttled[0].headers["Retry-After"]) <= 1 and "Retry-After" in error["message"]
    assert tight.stats.count("GET /v1.0/chats/{id}/messages", 429) == len(throttled)


def test_throttling_is_per_app(tight: RunningEmulator, http: httpx.Client) -> None:
    entra = Entra(tight, http)
    agent, ada = (
        bearer(entra.agent_token()),
        bearer(entra.human_token(tight.seed.humans[0].user_principal_name)),
    )
    url = f"{tight.graph_url}/chats/{tight.seed.chats[0].id}/messages"
    agent_codes = [http.get(url, headers=agent).status_code for _ in range(8)]
    assert 429 in agent_codes
    assert http.get(url, headers=ada).status_code == 200  # the public client app has its own budget


def test_forced_throttle_burst_answers_the_next_requests_with_429(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    http.post(emu.admin_url + "/throttle", json={"requests": 2, "retry_after": 7})
    codes = [http.get(emu.graph_url + "/me", headers=agent) for _ in range(3)]
    assert [r.status_code for r in codes] == [429, 429, 200]
    assert codes[0].headers["Retry-After"] == "7"
    assert_graph_error(codes[0], 429, "TooManyRequests")


def test_fault_with_count_fails_that_many_requests_then_stops(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    rule = http.post(
        emu.admin_url + "/faults", json={"error_rate": 1.0, "status": 503, "count": 2}
    ).json()
    assert rule["id"] >= 1
    codes = [http.get(emu.graph_url + "/me", headers=agent).status_code for _ in range(3)]
    assert codes == [503, 503, 200]
    assert http.get(emu.admin_url + "/faults").json()["faults"] == []


def test_fault_route_pattern_limits_which_requests_fail(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    http.post(emu.admin_url + "/faults", json={"status": 500, "route_pattern": r"/messages$"})
    chat = seeded_chat_id(emu.seed, 0)
    failed = http.get(f"{emu.graph_url}/chats/{chat}/messages", headers=agent)
    assert_graph_error(failed, 500, "InternalServerError")
    assert http.get(emu.graph_url + "/me/chats", headers=agent).status_code == 200
    assert http.delete(emu.admin_url + "/faults").json() == {"cleared": 1}
    assert http.get(f"{emu.graph_url}/chats/{chat}/messages", headers=agent).status_code == 200


def test_fault_after_commit_applies_the_write_but_loses_the_response(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    chat = seeded_chat_id(emu.seed, 0)
    before = len(emu.state.messages(chat))
    http.post(
        emu.admin_url + "/faults",
        json={"status": 504, "method": "POST", "after_commit": True, "count": 1},
    )
    response = http.post(
        f"{emu.graph_url}/chats/{chat}/messages",
        json={"body": {"content": "did it land?"}},
        headers=agent,
    )
    assert response.status_code == 504
    assert len(emu.state.messages(chat)) == before + 1
    last = emu.state.last_message(chat)
    assert last is not None and last.content == "did it land?"


def test_faults_on_the_token_endpoint_use_entra_error_shape(
    emu: RunningEmulator, http: httpx.Client, entra: Entra
) -> None:
    http.post(
        emu.admin_url + "/faults", json={"status": 503, "route_pattern": "/oauth2/", "count": 1}
    )
    response = entra.t1()
    assert response.status_code == 503 and response.json()["error"] == "temporarily_unavailable"
    assert response.headers["Retry-After"] == "1"
    assert entra.t1().status_code == 200


def test_stats_count_by_route_template_and_status(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    http.post(emu.admin_url + "/stats/reset")
    for chat in emu.seed.chats:
        http.get(f"{emu.graph_url}/chats/{chat.id}/messages", headers=agent)
    http.get(f"{emu.graph_url}/chats/19:unknown@thread.v2/messages", headers=agent)
    stats = http.get(emu.admin_url + "/stats").json()
    assert stats["counts"]["GET /v1.0/chats/{id}/messages"] == {
        "200": len(emu.seed.chats),
        "404": 1,
    }
    last = stats["recent"][-1]
    assert (
        last["route"] == "/v1.0/chats/{id}/messages"
        and last["method"] == "GET"
        and last["status"] == 404
    )
    assert (
        last["app_id"] == emu.seed.agent_identity.id and last["user_id"] == emu.seed.agent_user.id
    )
    assert {"monotonic", "wall", "path"} <= set(last)
    assert all(not r["route"].startswith("/_emulator") for r in stats["recent"])
    http.post(emu.admin_url + "/stats/reset")
    assert http.get(emu.admin_url + "/stats").json()["total"] == 0


def test_requests_answered_by_a_fault_or_throttle_are_counted_under_their_route(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    http.post(emu.admin_url + "/stats/reset")
    http.post(emu.admin_url + "/throttle", json={"requests": 1, "retry_after": 1})
    http.get(f"{emu.graph_url}/chats/{emu.seed.chats[0].id}/messages", headers=agent)
    http.post(emu.admin_url + "/faults", json={"error_rate": 1.0, "status": 503, "count": 1})
    http.get(f"{emu.graph_url}/me", headers=agent)
    counts = http.get(emu.admin_url + "/stats").json()["counts"]
    assert counts == {"GET /v1.0/chats/{id}/messages": {"429": 1}, "GET /v1.0/me": {"503": 1}}


def test_injected_history_keeps_its_creation_time(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str], clock: ManualClock
) -> None:
    chat = seeded_chat_id(emu.seed, 0)
    old = http.post(
        f"{emu.admin_url}/chats/{chat}/messages",
        json={
            "from_user": emu.seed.humans[0].user_principal_name,
            "content": "a week ago",
            "created": "-7d",
        },
    ).json()
    assert old["id"] == str(int(clock.now().timestamp() * 1000) - 7 * 86400 * 1000)
    ids = [
        m["id"]
        for m in http.get(f"{emu.graph_url}/chats/{chat}/messages?$top=50", headers=agent).json()[
            "value"
        ]
    ]
    assert ids[-1] == old["id"]


def test_injected_chat_is_listed_for_its_members(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    seed = emu.seed
    chat = http.post(
        emu.admin_url + "/chats",
        json={
            "members": [seed.agent_user.id, seed.humans[0].id, seed.humans[2].id],
            "topic": "Injected",
        },
    ).json()
    listed = http.get(emu.graph_url + "/me/chats?$top=50", headers=agent).json()["value"]
    assert chat["id"] in {c["id"] for c in listed}


def test_clock_advance_needs_a_manual_clock(
    tight: RunningEmulator, emu: RunningEmulator, http: httpx.Client, clock: ManualClock
) -> None:
    before = clock.now()
    assert http.post(emu.admin_url + "/clock", json={"seconds": 60}).status_code == 200
    assert (clock.now() - before).total_seconds() == 60
    assert http.post(tight.admin_url + "/clock", json={"seconds": 60}).status_code == 409

"""Graph's documented limits over real HTTP, counted on a throttling clock that stands still: exactly the
requests over each budget are answered 429 with Retry-After (whole seconds as Graph answers, or the
exact fractional wait when the emulator is started so; these counting tests ask for it), a 429
counts against the window, and the admin API reports every limit's figures and counts."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from seed_ids import seeded_chat_id

from emulator import (
    ManualMonotonic,
    RunningEmulator,
    ThrottleBudget,
    build_seed,
    demo_seed_path,
    load_seed,
    start_emulator,
)
from tests.emulator.emulator_testkit import Entra, assert_graph_error, bearer

Start = Callable[..., RunningEmulator]


@pytest.fixture
def ticks() -> ManualMonotonic:
    return ManualMonotonic()


@pytest.fixture
def limited(signing_key: rsa.RSAPrivateKey, ticks: ManualMonotonic) -> Iterator[Start]:
    """Start an emulator with Graph's default limits (or ``throttle``) on the manual throttling clock."""
    running: list[RunningEmulator] = []

    def start(
        chats: int = 3, throttle: ThrottleBudget | None = None, fractional: bool = True
    ) -> RunningEmulator:
        seed = build_seed(chats=chats, humans=3, history=1, throttle=throttle)
        emu = start_emulator(
            seed, signing_key=signing_key, throttle_clock=ticks, fractional_retry_after=fractional
        )
        running.append(emu)
        return emu

    yield start
    for emu in running:
        emu.stop()


def _throttled(response: httpx.Response) -> float:
    assert_graph_error(response, 429, "TooManyRequests")
    return float(response.headers["Retry-After"])


def _limit(emu: RunningEmulator, http: httpx.Client, name: str) -> dict[str, Any]:
    return http.get(emu.admin_url + "/throttle").json()["limits"][name]


def test_chat_message_reads_beyond_20_a_second_per_app_are_429(
    limited: Start, http: httpx.Client, ticks: ManualMonotonic
) -> None:
    emu = limited(chats=26)  # one read per chat: the per-chat limit stays out of the way
    agent = bearer(Entra(emu, http).agent_token())
    urls = [f"{emu.graph_url}/chats/{c.id}/messages" for c in emu.seed.chats]
    codes = [http.get(url, headers=agent) for url in urls[:25]]
    assert [r.status_code for r in codes] == [200] * 20 + [429] * 5
    assert {_throttled(r) for r in codes[20:]} == {1.0}
    ticks.advance(0.25)
    assert (
        _throttled(http.get(urls[25], headers=agent)) == 0.75
    )  # fractional: the window frees at 1 s
    ticks.advance(0.75)
    assert http.get(urls[0], headers=agent).status_code == 200
    assert _limit(emu, http, "chat_message_reads") == {
        "requests": 20,
        "window_s": 1.0,
        "scope": "app",
        "admitted": 21,
        "throttled": 6,
    }


def test_one_chat_is_read_at_most_once_a_second_and_a_429_counts_against_it(
    limited: Start, http: httpx.Client, ticks: ManualMonotonic
) -> None:
    emu = limited()
    agent = bearer(Entra(emu, http).agent_token())
    chat, other = (f"{emu.graph_url}/chats/{c.id}/messages" for c in emu.seed.chats[:2])
    assert http.get(chat, headers=agent).status_code == 200
    assert _throttled(http.get(chat, headers=agent)) == 1.0
    assert http.get(other, headers=agent).status_code == 200  # another chat has its own second
    ticks.advance(1.0)
    assert http.get(chat, headers=agent).status_code == 200
    ticks.advance(0.75)
    # Too early: this 429 counts against the window, so the chat's next second starts from it.
    assert _throttled(http.get(chat, headers=agent)) == 1.0
    ticks.advance(0.5)
    assert _throttled(http.get(chat, headers=agent)) == 1.0
    ticks.advance(1.0)
    assert http.get(chat, headers=agent).status_code == 200
    assert _limit(emu, http, "per_chat") == {
        "requests": 1,
        "window_s": 1.0,
        "scope": "app and chat",
        "admitted": 4,
        "throttled": 3,
    }


def test_one_chats_read_limit_is_counted_per_app_so_another_app_reads_it_while_the_agents_is_throttled(
    limited: Start, http: httpx.Client
) -> None:
    emu = limited()
    chat = emu.seed.chats[0]
    url = f"{emu.graph_url}/chats/{chat.id}/messages"
    agent = bearer(Entra(emu, http).agent_token())
    assert http.get(url, headers=agent).status_code == 200
    assert _throttled(http.get(url, headers=agent)) == 1.0

    def app_token(client_id: str) -> dict[str, str]:
        # v2.0 tokens name their app in azp only (no appid): two such apps are two apps.
        minted = http.post(
            emu.admin_url + "/tokens/api",
            json={
                "audience": "https://graph.microsoft.com",
                "client_id": client_id,
                "scp": "Chat.Read",
                "user_id": chat.members[0]
                if chat.members[0] != emu.seed.agent_user.id
                else chat.members[1],
            },
        )
        return bearer(minted.json()["access_token"])

    first, second = (
        app_token("11111111-0000-0000-0000-000000000001"),
        app_token("11111111-0000-0000-0000-000000000002"),
    )
    assert (
        http.get(url, headers=first).status_code == 200
    )  # another app: its own second of this chat
    assert _throttled(http.get(url, headers=first)) == 1.0
    assert http.get(url, headers=second).status_code == 200


def test_list_and_get_chat_beyond_5_a_second_per_user_are_429(
    limited: Start, http: httpx.Client, ticks: ManualMonotonic
) -> None:
    emu = limited()
    entra = Entra(emu, http)
    # Ada and Grace sign in through the same public client app: one app, two users.
    ada, grace = (bearer(entra.human_token(u.user_principal_name)) for u in emu.seed.humans[:2])
    chat = seeded_chat_id(emu.seed, 1)
    urls = [f"{emu.graph_url}/me/chats"] * 3 + [f"{emu.graph_url}/chats/{chat}"] * 3
    codes = [http.get(url, headers=ada).status_code for url in urls]
    assert codes == [200] * 5 + [429]
    assert http.get(f"{emu.graph_url}/me/chats", headers=grace).status_code == 200
    assert _throttled(http.get(f"{emu.graph_url}/me/chats", headers=ada)) == 1.0
    ticks.advance(1.0)
    assert http.get(f"{emu.graph_url}/me/chats", headers=ada).status_code == 200
    assert _limit(emu, http, "chats_per_user")["requests"] == 5


def test_other_teams_gets_beyond_30_a_second_per_app_are_429(
    limited: Start, http: httpx.Client, ticks: ManualMonotonic
) -> None:
    emu = limited()
    agent = bearer(Entra(emu, http).agent_token())
    url = f"{emu.graph_url}/chats/{emu.seed.chats[1].id}/members"
    codes = [http.get(url, headers=agent) for _ in range(32)]
    assert [r.status_code for r in codes] == [200] * 30 + [429] * 2
    assert _throttled(codes[-1]) == 1.0
    ticks.advance(1.0)
    assert http.get(url, headers=agent).status_code == 200


def test_mail_beyond_its_ten_minute_budget_per_mailbox_is_429(
    limited: Start, http: httpx.Client, ticks: ManualMonotonic
) -> None:
    # Graph's figure is 10,000 per 10 minutes; the same window with a budget of 5 counts the same way.
    emu = limited(throttle=ThrottleBudget(mail_per_10_min=5))
    entra = Entra(emu, http)
    ada, grace = (bearer(entra.human_token(u.user_principal_name)) for u in emu.seed.humans[:2])
    codes = [http.get(f"{emu.graph_url}/me/messages", headers=ada) for _ in range(6)]
    assert [r.status_code for r in codes] == [200] * 5 + [429]
    assert _throttled(codes[-1]) == 600.0
    assert (
        http.get(f"{emu.graph_url}/me/messages", headers=grace).status_code == 200
    )  # another mailbox
    ticks.advance(599.5)
    assert _throttled(http.get(f"{emu.graph_url}/me/messages", headers=ada)) == 0.5
    ticks.advance(0.5)
    assert http.get(f"{emu.graph_url}/me/messages", headers=ada).status_code == 200


def test_retry_after_is_whole_seconds_unless_fractional_waits_are_asked_for(
    limited: Start, http: httpx.Client, ticks: ManualMonotonic
) -> None:
    # Live tenants answer whole seconds (5, 41, 315 s seen), and Microsoft's Graph SDK reads no other form.
    emu = limited(throttle=ThrottleBudget(mail_per_10_min=2), fractional=False)
    ada = bearer(Entra(emu, http).human_token(emu.seed.humans[0].user_principal_name))
    url = f"{emu.graph_url}/me/messages"
    assert [http.get(url, headers=ada).status_code for _ in range(2)] == [200, 200]
    ticks.advance(0.25)
    assert http.get(url, headers=ada).headers["Retry-After"] == "600"  # 599.75 s, rounded up
    ticks.advance(599.5)
    assert http.get(url, headers=ada).headers["Retry-After"] == "1"  # 0.25 s, rounded up


def test_a_mailbox_serves_at_most_4_concurrent_requests_per_app(
    limited: Start, http: httpx.Client
) -> None:
    emu = limited()
    entra = Entra(emu, http)
    ada, grace = (bearer(entra.human_token(u.user_principal_name)) for u in emu.seed.humans[:2])
    http.post(emu.admin_url + "/holds", json={"route_pattern": "/me/messages$"}).raise_for_status()
    results: list[httpx.Response] = []
    lock = threading.Lock()

    def read() -> None:
        with httpx.Client(timeout=30) as client:
            response = client.get(f"{emu.graph_url}/me/messages", headers=ada)
        with lock:
            results.append(response)

    threads = [threading.Thread(target=read) for _ in range(6)]
    try:
        for t in threads:
            t.start()
        _until(
            lambda: http.get(emu.admin_url + "/holds").json()["waiting"] == 4 and len(results) == 2
        )
        assert [_throttled(r) for r in results] == [0.5, 0.5]
        # Another mailbox of the same app is not held back by Ada's four.
        assert (
            http.get(f"{emu.graph_url}/me/mailFolders/inbox/messages", headers=grace).status_code
            == 200
        )
    finally:
        http.delete(emu.admin_url + "/holds")
        for t in threads:
            t.join(timeout=30)
    assert sorted(r.status_code for r in results) == [200] * 4 + [429] * 2
    # The slots were freed when the held requests answered.
    assert http.get(f"{emu.graph_url}/me/messages", headers=ada).status_code == 200
    assert _limit(emu, http, "mail_concurrency") == {
        "requests": 4,
        "window_s": 0.0,
        "scope": "app and mailbox, in flight",
        "admitted": 6,
        "throttled": 2,
    }


def test_the_default_budget_is_graphs_and_the_demo_seed_keeps_it() -> None:
    figures = ThrottleBudget()
    assert (
        figures.enabled,
        figures.chat_messages_per_s,
        figures.per_chat_per_s,
        figures.chats_per_user_per_s,
        figures.other_per_s,
        figures.mail_per_10_min,
        figures.mail_concurrent,
    ) == (True, 20, 1, 5, 30, 10_000, 4)
    assert load_seed(demo_seed_path()).throttle == figures


def test_a_relaxed_seed_throttles_nothing(limited: Start, http: httpx.Client) -> None:
    emu = limited(throttle=ThrottleBudget.relaxed())
    agent = bearer(Entra(emu, http).agent_token())
    url = f"{emu.graph_url}/chats/{emu.seed.chats[0].id}/messages"
    assert {http.get(url, headers=agent).status_code for _ in range(40)} == {200}
    assert http.get(emu.admin_url + "/throttle").json() == {
        "enabled": False,
        "limits": {},
        "in_flight": 0,
        "forced_remaining": 0,
    }


def test_resetting_the_limits_empties_the_windows(limited: Start, http: httpx.Client) -> None:
    emu = limited()
    agent = bearer(Entra(emu, http).agent_token())
    url = f"{emu.graph_url}/chats/{emu.seed.chats[0].id}/messages"
    assert [http.get(url, headers=agent).status_code for _ in range(2)] == [200, 429]
    assert http.delete(emu.admin_url + "/throttle").json() == {"reset": True}
    assert _limit(emu, http, "per_chat")["throttled"] == 0
    assert http.get(url, headers=agent).status_code == 200


def _until(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    """Poll ``condition`` with a bounded wait (a condition, not a sleep, decides)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError("the condition did not hold within the bounded wait")

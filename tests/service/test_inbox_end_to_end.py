"""The inbox through real replicas: two replica processes over Azurite and the Graph emulator, hosts
without pushes on the official MCP Python client calling ``receive_messages`` in a loop, each with its
own static token (``ENTRABOT_MCP_TOKEN_HOSTS`` names the hosts)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types import Implementation

from emulator.seed import ThrottleBudget, build_seed
from emulator.server import RunningEmulator, start_emulator
from service.devstack.azurite import Azurite
from service.devstack.fleet import LocalFleet
from service.devstack.traffic import HumanTraffic

pytestmark = [pytest.mark.azurite, pytest.mark.slow]

ALICE, BOB = "alice-token-0123456789", "bob-token-0123456789"
BOUND_S = 60.0


@pytest.fixture(scope="module")
def emulator() -> Iterator[RunningEmulator]:
    seed = build_seed(chats=3, throttle=ThrottleBudget(chat_messages_per_s=500, other_per_s=500))
    with start_emulator(seed) as running:
        yield running


@pytest.fixture
def fleet(
    azurite: Azurite, emulator: RunningEmulator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalFleet]:
    """A fleet (and container) per test: every inbox host that called is a target for an hour, and
    messages are spread over the live hosts, so hosts one test made would take another's messages."""
    running = LocalFleet(
        emulator.seed,
        tmp_path_factory.mktemp("inbox"),
        replicas=2,
        azurite=azurite,
        emulator=emulator,
        extra_env={
            "ENTRABOT_CHAT_POLL_INTERVAL_S": "1",
            "ENTRABOT_CHAT_POLL_JITTER_S": "0",
            "ENTRABOT_MCP_STATIC_TOKENS": f"{ALICE},{BOB}",
            "ENTRABOT_MCP_TOKEN_HOSTS": "alice,bob",
        },
    )
    running.start()
    try:
        yield running
    finally:
        for member in running.members:
            member.terminate()


@asynccontextmanager
async def host(
    url: str, token: str, name: str = "codex-mcp-client", *, stateless: bool = False
) -> AsyncIterator[Client]:
    """A handshake-era host (a session on its replica), or with ``stateless`` the SDK's default, which
    settles on 2026-07-28: no initialize, no session, every request on its own."""
    async with (
        create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http,
        Client(
            streamable_http_client(url, http_client=http),
            mode="auto" if stateless else "legacy",
            client_info=Implementation(name=name, version="0.171.0"),
            read_timeout_seconds=BOUND_S,
        ) as client,
    ):
        assert (client.protocol_version == "2026-07-28") is stateless
        yield client


async def receive(client: Client, cursor: str | None, wait_s: float) -> dict[str, Any]:
    args: dict[str, Any] = {"wait_s": wait_s}
    if cursor is not None:
        args["cursor"] = cursor
    result = await client.call_tool("receive_messages", args)
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


async def test_an_inbox_host_gets_every_message_once_across_two_replicas_and_its_cursor_is_its_own(
    emulator: RunningEmulator, fleet: LocalFleet
) -> None:
    r0, r1 = fleet.members
    got: list[str] = []
    async with host(r0.mcp_url, ALICE) as a0, host(r1.mcp_url, ALICE) as a1:
        first = await receive(a0, None, 0)
        cursor = first["cursor"]
        chat = emulator.seed.chats[1].id or ""
        grace = emulator.seed.humans[1]
        async with httpx.AsyncClient(timeout=30) as http:
            traffic = HumanTraffic(emulator.seed, emulator.base_url, http)
            posted = [
                (await traffic.post_chat(grace, chat, f"inbox {i}")).message_id for i in range(4)
            ]
        # The host alternates replicas, as a load balancer would send its calls.
        async with asyncio.timeout(BOUND_S * 2):
            turn = 0
            while not set(posted) <= set(got):
                out = await receive((a0, a1)[turn % 2], cursor, 10)
                got += [m["message_id"] for m in out["messages"]]
                assert all(m["content"].startswith("<external_content") for m in out["messages"])
                cursor, turn = out["cursor"], turn + 1
        assert sorted(got) == sorted(set(got)), "a message reached the host twice"
        assert [m for m in got if m in posted] == posted  # in the order people wrote them
        alice_cursor = cursor
        # Everything acknowledged: a last look returns nothing, through either replica.
        assert (await receive(a1, cursor, 0))["messages"] == []

    async with host(r1.mcp_url, BOB) as b1:
        refused = await b1.call_tool("receive_messages", {"cursor": alice_cursor, "wait_s": 0})
        assert refused.is_error and "another host" in str(refused.content)
        mine = await receive(b1, None, 0)
        assert not {m["message_id"] for m in mine["messages"]} & set(posted)


async def test_operators_see_the_inbox_host_in_readyz(fleet: LocalFleet) -> None:
    r0 = fleet.members[0]
    async with host(r0.mcp_url, BOB) as b0:
        await receive(b0, None, 0)
    async with httpx.AsyncClient(timeout=10) as http:
        ready = (await http.get(f"{r0.base_url}/readyz")).json()
    shown = [h for h in ready["hosts"]["inbox"] if h["id"] == "bob"]
    assert shown and shown[0]["kind"] == "inbox" and shown[0]["last_call"]
    assert shown[0]["client"]["name"] == "codex-mcp-client"
    assert BOB not in str(ready)


async def test_a_2026_07_28_host_drains_its_inbox_statelessly_through_either_replica(
    emulator: RunningEmulator, fleet: LocalFleet
) -> None:
    r0, r1 = fleet.members
    async with (
        host(r0.mcp_url, BOB, "gemini-cli", stateless=True) as b0,
        host(r1.mcp_url, BOB, "gemini-cli", stateless=True) as b1,
    ):
        cursor = (await receive(b0, None, 0))["cursor"]
        chat = emulator.seed.chats[1].id or ""
        async with httpx.AsyncClient(timeout=30) as http:
            traffic = HumanTraffic(emulator.seed, emulator.base_url, http)
            posted = (
                await traffic.post_chat(emulator.seed.humans[1], chat, "stateless")
            ).message_id
        got: list[str] = []
        async with asyncio.timeout(BOUND_S * 2):
            turn = 0
            while posted not in got:
                out = await receive((b1, b0)[turn % 2], cursor, 10)
                got += [m["message_id"] for m in out["messages"]]
                cursor, turn = out["cursor"], turn + 1
        assert got.count(posted) == 1
        assert (await receive(b1, cursor, 0))["messages"] == []

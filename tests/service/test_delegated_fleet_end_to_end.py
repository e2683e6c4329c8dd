"""Delegated mode end to end: two replica processes on one Azurite container, the Graph emulator over HTTP,
Ada signed in by device code, a push host on each replica and a tools-only host calling send_teams_message
over MCP.

In this mode the agent's posts carry Ada's own identity. A message Grace writes and one Ada types herself
each reach exactly one host; the agent's prefixed replies, sent through either replica, reach no host on
either. And a replica of a container nobody signed in to refuses to start, with the command to run.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from eventually import SLOW_POLL_S, SLOW_WAIT_S, eventually
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import Implementation
from sign_in_kit import delegated_seed, delegated_settings, new_token_key, sign_in_as

from emulator.seed import ThrottleBudget
from emulator.server import RunningEmulator, start_emulator
from service.devstack.azurite import Azurite
from service.devstack.channel_host import ChannelHost
from service.devstack.emulator_env import delegated_env
from service.devstack.fleet import DEV_TOKEN, LocalFleet
from service.devstack.traffic import HumanTraffic
from service.domain.conversation import TEAMS_CHATS
from service.ledger.claims.chat_cursor import parse_chat_cursor
from service.storage.blob import BlobBackend
from service.telemetry.metrics import StorageMetrics

pytestmark = [pytest.mark.azurite, pytest.mark.slow]

START_BOUND_S = 60.0


@pytest.fixture(scope="module")
def emulator() -> Iterator[RunningEmulator]:
    seed = delegated_seed(
        chats=2, history=0, throttle=ThrottleBudget(chat_messages_per_s=500, other_per_s=500)
    )
    with start_emulator(seed) as running:
        yield running


def fleet_env(emulator: RunningEmulator, key: str) -> dict[str, str]:
    # The agent-user settings LocalFleet gives every replica are blanked: this tenant has no Agent ID.
    blank = {
        name: ""
        for name in (
            "ENTRABOT_BLUEPRINT_CLIENT_ID",
            "ENTRABOT_BLUEPRINT_CLIENT_SECRET",
            "ENTRABOT_AGENT_IDENTITY_ID",
            "ENTRABOT_AGENT_USER_ID",
            "ENTRABOT_AGENT_USER_UPN",
        )
    }
    return {
        **blank,
        **delegated_env(emulator.seed, base_url=emulator.base_url, token_key=key),
        "ENTRABOT_CHAT_POLL_INTERVAL_S": "0.5",
        "ENTRABOT_CHAT_SCAN_INTERVAL_S": "1",
    }


@pytest.fixture
async def fleet(
    azurite: Azurite, emulator: RunningEmulator, tmp_path: Path
) -> AsyncIterator[LocalFleet]:
    key = new_token_key()
    started = LocalFleet(
        emulator.seed,
        tmp_path / "fleet",
        replicas=2,
        azurite=azurite,
        emulator=emulator,
        extra_env=fleet_env(emulator, key),
    )
    started.ensure_container()
    store = BlobBackend.from_connection_string(
        azurite.connection_string, started.container, metrics=StorageMetrics()
    )
    try:
        await sign_in_as(
            emulator,
            delegated_settings(emulator, key),
            store,
            emulator.seed.humans[0].user_principal_name,
        )
    finally:
        await store.aclose()
    await asyncio.to_thread(started.start)
    yield started
    for member in started.members:
        member.terminate()


async def send(url: str, chat_id: str, text: str) -> dict[str, Any]:
    """send_teams_message from a host that takes no pushes, not waiting for a reply."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {DEV_TOKEN}"}) as http,
        Client(
            streamable_http_client(url, http_client=http),
            mode="legacy",
            client_info=Implementation(name="copilot-cli", version="1.0"),
            read_timeout_seconds=60,
        ) as client,
    ):
        result = await client.call_tool(
            "send_teams_message", {"chat_id": chat_id, "text": text, "wait_for_reply": False}
        )
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def decided_by_the_fleet(
    store: BlobBackend, emulator: RunningEmulator, chat_id: str, message_ids: set[str]
) -> bool:
    """Whether the chat's cursor covers every one of these messages (recorded, or at or behind its
    watermark): some replica read them all and claimed, or decided never to push, each."""
    text = await store.read_text(TEAMS_CHATS.cursor_key(chat_id))
    if text is None:
        return False
    cursor = parse_chat_cursor(text)
    created = {m.id: m.created for m in emulator.state.messages(chat_id)}
    return all(
        cursor.is_recorded(m) or (cursor.last_ts is not None and created[m] <= cursor.last_ts)
        for m in message_ids
    )


async def test_a_persons_message_is_delivered_once_and_the_agents_replies_in_their_name_never(
    fleet: LocalFleet, emulator: RunningEmulator, azurite: Azurite
) -> None:
    seed = emulator.seed
    ada, grace = seed.humans[0], seed.humans[1]
    chat = seed.chats[1].id or ""
    first, second = fleet.members
    stop = asyncio.Event()
    hosts = [
        ChannelHost(f"host-{i}", [m.mcp_url], token=DEV_TOKEN) for i, m in enumerate(fleet.members)
    ]
    tasks = [asyncio.create_task(h.run(stop)) for h in hosts]
    store = BlobBackend.from_connection_string(
        azurite.connection_string, fleet.container, metrics=StorageMetrics()
    )
    try:
        await eventually(
            lambda: all(h.connected_to for h in hosts),
            "both hosts connected",
            timeout_s=SLOW_WAIT_S,
        )
        opened = await send(first.mcp_url, chat, "On it.")  # the chat is watched from now on
        assert opened["posted_as"] == "signed_in_user"
        await eventually(
            lambda: decided_by_the_fleet(store, emulator, chat, {opened["message_id"]}),
            "the chat's first sight, at the agent's own post",
            timeout_s=SLOW_WAIT_S,
            poll_s=SLOW_POLL_S,
        )
        async with httpx.AsyncClient(timeout=30) as http:
            traffic = HumanTraffic(seed, emulator.base_url, http)
            from_grace = (
                await traffic.post_chat(grace, chat, "Thanks! Can you update the notes too?")
            ).message_id
            from_ada = (
                await traffic.post_chat(ada, chat, "And tag the release, please.")
            ).message_id
        replied = await send(second.mcp_url, chat, "Notes updated and release tagged.")
        people = {from_grace, from_ada}
        agent = {opened["message_id"], replied["message_id"]}

        def pushed() -> Counter[str]:
            return Counter(p.message_id for h in hosts for p in h.pushes)

        await eventually(
            lambda: people <= set(pushed()),
            "both people's messages pushed",
            timeout_s=SLOW_WAIT_S,
            poll_s=SLOW_POLL_S,
        )
        await eventually(
            lambda: decided_by_the_fleet(store, emulator, chat, people | agent),
            "every message of the chat decided by the fleet",
            timeout_s=SLOW_WAIT_S,
            poll_s=SLOW_POLL_S,
        )
        assert pushed() == Counter({from_grace: 1, from_ada: 1})
        in_graph = {m.id: m for m in emulator.state.messages(chat)}
        for message_id in agent:
            sender = in_graph[message_id].sender
            assert (
                sender is not None and sender.user_id == ada.id
            )  # the agent's reply carries Ada's identity
            assert in_graph[message_id].content.startswith("[EntraBot] ")
    finally:
        stop.set()
        await asyncio.gather(*tasks)
        await store.aclose()


async def test_a_replica_of_a_container_nobody_signed_in_to_refuses_to_start(
    azurite: Azurite, emulator: RunningEmulator, tmp_path: Path
) -> None:
    unsigned = LocalFleet(
        emulator.seed,
        tmp_path / "unsigned",
        replicas=1,
        azurite=azurite,
        emulator=emulator,
        extra_env=fleet_env(emulator, new_token_key()),
    )
    unsigned.ensure_container()
    unsigned.workdir.mkdir(parents=True)
    replica = unsigned._replica(0)  # noqa: SLF001 - one process, started by hand: it is expected to exit
    replica.start()
    assert replica.proc is not None
    code = await asyncio.wait_for(asyncio.to_thread(replica.proc.wait), START_BOUND_S)
    log = replica.log_tail(10)
    assert code != 0 and "nobody has signed in" in log and "entrabot-fleet signin" in log, log

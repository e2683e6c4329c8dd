"""A real replica whose only target is a non-push host's sponsor wait claims one sponsor message, not
every one it sees: the wait gets the first of two, and the second reaches a push host that connects
later. A replica process, Azurite, the Graph emulator over HTTP, the official MCP Python client as the
non-push host and the local ChannelHost as the push host."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import Implementation

from emulator.seed import ThrottleBudget, build_seed
from emulator.server import RunningEmulator, start_emulator
from service.devstack.azurite import Azurite
from service.devstack.channel_host import ChannelHost
from service.devstack.fleet import DEV_TOKEN, LocalFleet
from service.devstack.traffic import HumanTraffic
from service.domain.conversation import TEAMS_CHATS
from service.storage.blob import BlobBackend
from service.telemetry.metrics import StorageMetrics

pytestmark = [pytest.mark.azurite, pytest.mark.slow]

BOUND_S = 30.0
BOOTSTRAP_WAITS = 15  # short waits while the replica gives every chat its first sight
SAME_CHAT = (0, 0)
TWO_CHATS = (0, 1)  # Ada's oneOnOne, then a group chat with Ada in it


@pytest.fixture
def emulator() -> Iterator[RunningEmulator]:
    seed = build_seed(
        chats=3, history=0, throttle=ThrottleBudget(chat_messages_per_s=500, other_per_s=500)
    )
    with start_emulator(seed) as running:
        yield running


@contextmanager
def one_replica(
    azurite: Azurite, emulator: RunningEmulator, workdir: Path, **env: str
) -> Iterator[LocalFleet]:
    """One replica polling every second, with ``env`` (ENTRABOT_* settings) besides."""
    fleet = LocalFleet(
        emulator.seed,
        workdir,
        replicas=1,
        azurite=azurite,
        emulator=emulator,
        extra_env={"ENTRABOT_CHAT_POLL_INTERVAL_S": "1", "ENTRABOT_CHAT_POLL_JITTER_S": "0", **env},
    )
    fleet.start()
    try:
        yield fleet
    finally:
        for member in fleet.members:
            member.terminate()


@pytest.fixture
def fleet(azurite: Azurite, emulator: RunningEmulator, tmp_path: Path) -> Iterator[LocalFleet]:
    with one_replica(azurite, emulator, tmp_path) as running:
        yield running


def chat_of(emulator: RunningEmulator, index: int) -> str:
    return emulator.seed.chats[index].id or ""


async def wait_for_sponsor(url: str, timeout_s: float) -> dict[str, Any]:
    """One ``wait_for_sponsor_dm`` call from a host that takes no pushes."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {DEV_TOKEN}"}) as http,
        Client(
            streamable_http_client(url, http_client=http),
            mode="legacy",
            client_info=Implementation(name="copilot-cli", version="1.0"),
            read_timeout_seconds=timeout_s + 20,
        ) as client,
    ):
        result = await client.call_tool("wait_for_sponsor_dm", {"timeout_s": timeout_s})
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def bootstrap_every_chat(fleet: LocalFleet, emulator: RunningEmulator) -> None:
    """Short waits until every chat has its cursor in the container, so what Ada writes next is new
    to the fleet. Each wait ends before the next step: then the replica holds no target at all."""
    assert fleet.azurite is not None
    store = BlobBackend.from_connection_string(
        fleet.azurite.connection_string, fleet.container, metrics=StorageMetrics()
    )
    chats = [chat_of(emulator, i) for i in range(len(emulator.seed.chats))]
    try:
        for _ in range(BOOTSTRAP_WAITS):
            out = await wait_for_sponsor(fleet.members[0].mcp_url, 2.0)
            assert out["outcome"] == "timeout"  # nobody has written yet
            if all([await store.read_text(TEAMS_CHATS.cursor_key(c)) is not None for c in chats]):
                return
        raise AssertionError("the replica did not give every chat its first sight")
    finally:
        await store.aclose()


@pytest.mark.parametrize("chats", [SAME_CHAT, TWO_CHATS], ids=["same-chat", "two-chats"])
async def test_a_wait_gets_the_first_sponsor_message_and_a_push_host_connected_later_the_second(
    fleet: LocalFleet, emulator: RunningEmulator, chats: tuple[int, int]
) -> None:
    replica = fleet.members[0]
    await bootstrap_every_chat(fleet, emulator)
    ada = emulator.seed.sponsors[0]
    async with httpx.AsyncClient(timeout=30) as http:
        traffic = HumanTraffic(emulator.seed, emulator.base_url, http)
        # Written while no host is connected: the wait's first cycle sees both.
        first = await traffic.post_chat(ada, chat_of(emulator, chats[0]), "First: ship it.")
        second = await traffic.post_chat(
            ada, chat_of(emulator, chats[1]), "Second: and tag the release."
        )

    out = await wait_for_sponsor(replica.mcp_url, BOUND_S)
    assert out["outcome"] == "reply" and out["sponsor_reply"]["message_id"] == first.message_id

    stop = asyncio.Event()
    host = ChannelHost("later", [replica.mcp_url], token=DEV_TOKEN)
    task = asyncio.create_task(host.run(stop))
    try:
        async with asyncio.timeout(BOUND_S):
            while second.message_id not in {p.message_id for p in host.pushes}:
                await asyncio.sleep(0.1)
        assert [p.message_id for p in host.pushes] == [second.message_id]  # the first not again
    finally:
        stop.set()
        await task

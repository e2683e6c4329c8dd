"""Real hosts against a real replica: the official Python and TypeScript MCP clients receive channel
pushes for messages a seeded human posts through Graph; a non-push host gets the sponsor's reply."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess
from collections.abc import Callable, Iterator
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
from service.devstack.fleet import DEV_TOKEN, ReplicaProcess
from service.devstack.traffic import HumanTraffic
from tests.mcp.server_fixture import eventually
from tests.service.test_sponsor_wait_takes_one_end_to_end import one_replica

pytestmark = [pytest.mark.azurite, pytest.mark.slow]

TS_CLIENT = Path(__file__).resolve().parents[1] / "mcp" / "ts-client"
BOUND_S = 30.0


@pytest.fixture(scope="module")
def emulator() -> Iterator[RunningEmulator]:
    seed = build_seed(chats=3, throttle=ThrottleBudget(chat_messages_per_s=500, other_per_s=500))
    with start_emulator(seed) as running:
        yield running


@pytest.fixture(scope="module")
def replica(
    azurite: Azurite, emulator: RunningEmulator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ReplicaProcess]:
    with one_replica(azurite, emulator, tmp_path_factory.mktemp("hosts")) as fleet:
        yield fleet.members[0]


async def until(check: Callable[[], Any], what: str) -> None:
    await eventually(check, what, timeout_s=BOUND_S)


async def metric(replica: ReplicaProcess, sample: str) -> float:
    """One sample of the replica's /metrics (name and labels as exposed), 0 while it is not there yet."""
    async with httpx.AsyncClient(timeout=10) as http:
        text = (await http.get(f"{replica.base_url}/metrics")).text
    values = [
        float(line.split()[-1]) for line in text.splitlines() if line.startswith(sample + " ")
    ]
    return values[0] if values else 0.0


async def sponsor_waits(replica: ReplicaProcess) -> float:
    return await metric(replica, "entrabot_sponsor_waits")


async def chat_poll_cycles(replica: ReplicaProcess) -> float:
    return await metric(replica, 'entrabot_loop_cycles_total{loop="chat_poll",outcome="ok"}')


async def until_chats_polled_with_a_target(replica: ReplicaProcess) -> None:
    """Return once a whole chat poll cycle ran while a target was connected: the chats have had their
    first sight, so what a human posts from now on is new, not history the first sight skips."""
    seen = await chat_poll_cycles(replica)  # a cycle in flight may have started before the target

    async def two_more_and_every_chat_seen() -> bool:
        return (
            await chat_poll_cycles(replica) >= seen + 2
            and await metric(replica, "entrabot_chat_first_sights_pending") == 0
        )

    await until(
        two_more_and_every_chat_seen,
        "two chat poll cycles with the host connected, every chat seen",
    )


def chat_of(emulator: RunningEmulator, index: int) -> str:
    return emulator.seed.chats[index].id or ""


async def test_the_python_client_receives_pushes_for_messages_a_human_posts(
    emulator, replica
) -> None:
    stop = asyncio.Event()
    host = ChannelHost("py", [replica.mcp_url], token=DEV_TOKEN)
    task = asyncio.create_task(host.run(stop))
    try:
        await until(lambda: host.connected_to, "the host to connect")
        await until_chats_polled_with_a_target(replica)
        async with httpx.AsyncClient(timeout=30) as http:
            traffic = HumanTraffic(emulator.seed, emulator.base_url, http)
            grace = emulator.seed.humans[1]
            posted = [
                await traffic.post_chat(grace, chat_of(emulator, 1), f"python host {i}")
                for i in range(3)
            ]
        await until(
            lambda: {p.message_id for p in posted} <= {p.message_id for p in host.pushes},
            "the pushes",
        )
        pushes = [p for p in host.pushes if p.message_id in {x.message_id for x in posted}]
        assert [p.message_id for p in pushes] == [p.message_id for p in posted]
        assert {p.chat_id for p in pushes} == {chat_of(emulator, 1)}
        assert all("[external_content" in p.content and "<" not in p.content for p in pushes)
    finally:
        stop.set()
        await task


async def test_the_typescript_client_lists_calls_and_receives_pushes(emulator, replica) -> None:
    node = shutil.which("node")
    assert node is not None, "node is not installed"
    if not (TS_CLIENT / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir():
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund"], cwd=TS_CLIENT, check=True, timeout=300
        )
    process = await asyncio.create_subprocess_exec(
        node,
        "push_client.mjs",
        replica.mcp_url,
        "2",
        str(int(BOUND_S * 1000)),
        DEV_TOKEN,
        "list_watched_chats",
        "{}",
        cwd=TS_CLIENT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    async with asyncio.timeout(BOUND_S):
        ready = json.loads(await process.stdout.readline())
    assert ready["event"] == "ready" and ready["protocolVersion"] == "2025-11-25"
    assert "send_teams_message" in ready["tools"] and "claude/channel" in ready["experimental"]
    assert ready["echo"]["count"] == 3
    await until_chats_polled_with_a_target(replica)
    async with httpx.AsyncClient(timeout=30) as http:
        traffic = HumanTraffic(emulator.seed, emulator.base_url, http)
        alan = emulator.seed.humans[2] if len(emulator.seed.humans) > 2 else emulator.seed.humans[1]
        chat = next(c.id for c in emulator.seed.chats if alan.id in c.members)
        posted = [await traffic.post_chat(alan, chat, f"typescript host {i}") for i in range(2)]
    async with asyncio.timeout(BOUND_S + 10):
        done = json.loads(await process.stdout.readline())
        await process.wait()
    assert [p["meta"]["message_id"] for p in done["pushes"]] == [p.message_id for p in posted]


async def test_a_non_push_host_gets_the_sponsors_reply_from_another_chat(emulator, replica) -> None:
    sent_to, reply_in = chat_of(emulator, 1), chat_of(emulator, 0)  # chat 0 is the 1:1 with Ada
    ada = emulator.seed.sponsors[0]

    async def ada_replies_later() -> str:
        # Once the send's wait is pending, so the reply is the one it waits for.
        await until(lambda: sponsor_waits(replica), "the send's sponsor wait")
        async with httpx.AsyncClient(timeout=30) as http:
            posted = await HumanTraffic(emulator.seed, emulator.base_url, http).post_chat(
                ada, reply_in, "Yes, go ahead"
            )
        return posted.message_id

    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {DEV_TOKEN}"}) as http,
        Client(
            streamable_http_client(replica.mcp_url, http_client=http),
            mode="legacy",
            client_info=Implementation(name="copilot-cli", version="1.0"),
            read_timeout_seconds=BOUND_S + 20,
        ) as client,
    ):
        reply_task = asyncio.create_task(ada_replies_later())
        result = await client.call_tool(
            "send_teams_message",
            {"chat_id": sent_to, "text": "Shall I ship?", "timeout_s": BOUND_S},
        )
        reply_id = await reply_task
    assert not result.is_error, result.content
    out = result.structured_content
    assert out["wait"] == "reply" and out["sponsor_reply"]["chat_id"] == reply_in
    assert (
        out["sponsor_reply"]["message_id"] == reply_id
        and out["sponsor_reply"]["verified_sponsor"] is True
    )
    assert reply_in in out["_next_action"]


async def test_an_image_a_person_pasted_reaches_the_python_client_as_image_content(
    emulator, replica
) -> None:
    chat = chat_of(emulator, 1)
    grace = emulator.seed.humans[1]
    png = bytes.fromhex("89504e470d0a1a0a") + b"entrabot-test-image"
    async with httpx.AsyncClient(timeout=30) as admin:
        response = await admin.post(
            f"{emulator.admin_url}/chats/{chat}/messages",
            json={
                "from_user": grace.id,
                "content": "the error I get",
                "images": [
                    {"content_type": "image/png", "data_base64": base64.b64encode(png).decode()}
                ],
            },
        )
        assert response.status_code == 201, response.text
    message_id = response.json()["id"]
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {DEV_TOKEN}"}) as mcp_http,
        Client(
            streamable_http_client(replica.mcp_url, http_client=mcp_http),
            mode="legacy",
            client_info=Implementation(name="copilot-cli", version="1.0"),
            read_timeout_seconds=BOUND_S,
        ) as client,
    ):
        # The replica tells the model at initialize how to catch up on what it may have missed.
        assert client.instructions is not None and "catch_up" in client.instructions
        result = await client.call_tool("view_image", {"chat_id": chat, "message_id": message_id})
    assert not result.is_error, result.content
    [_, image] = result.content
    assert (
        image.type == "image"
        and image.mime_type == "image/png"
        and base64.b64decode(image.data) == png
    )
    assert result.structured_content["message"]["content"].startswith("<external_content")

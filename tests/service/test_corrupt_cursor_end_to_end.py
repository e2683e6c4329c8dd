"""A corrupt chat cursor on a real replica (Azurite, the emulator, a connected host): the stall shows
in /metrics and /readyz without failing readiness, and ``repair-chat`` un-stalls it without replay."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from eventually import SLOW_POLL_S, SLOW_WAIT_S, eventually

from emulator.seed import ThrottleBudget, build_seed
from emulator.server import start_emulator
from service.devstack.azurite import Azurite
from service.devstack.channel_host import ChannelHost
from service.devstack.fleet import DEV_TOKEN, LocalFleet
from service.devstack.traffic import HumanTraffic
from service.domain.conversation import TEAMS_CHATS
from service.storage.blob import BlobBackend
from service.telemetry.metrics import StorageMetrics

pytestmark = pytest.mark.azurite


def test_a_corrupt_cursor_is_visible_without_failing_readiness_and_repair_chat_resumes_it_without_replay(
    azurite: Azurite, tmp_path: Path
) -> None:
    # Three messages of history per chat, a minute apart, the newest a minute old.
    seed = build_seed(
        chats=2, history=3, throttle=ThrottleBudget(chat_messages_per_s=500, other_per_s=500)
    )
    with start_emulator(seed) as emulator:
        fleet = LocalFleet(
            seed,
            tmp_path,
            replicas=1,
            azurite=azurite,
            emulator=emulator,
            extra_env={
                "ENTRABOT_CHAT_POLL_INTERVAL_S": "0.5",
                "ENTRABOT_CHAT_POLL_JITTER_S": "0.1",
            },
        )
        fleet.start()
        [member] = fleet.members
        try:
            asyncio.run(_scenario(fleet, member.base_url, member.mcp_url, member.env, tmp_path))
        finally:
            fleet.stop()


async def _scenario(
    fleet: LocalFleet, base_url: str, mcp_url: str, env: dict[str, str], cwd: Path
) -> None:
    assert fleet.emulator is not None and fleet.azurite is not None
    seed = fleet.seed
    stalled, healthy = (c for c in fleet.emulator.state.chats_of(seed.agent_user.id))
    ada = seed.humans[0]  # a member of every chat the seed builds
    history_ids = {m.id for m in fleet.emulator.state.messages(stalled.id)}
    assert history_ids, "the seed gives every chat a history"
    store = BlobBackend.from_connection_string(
        fleet.azurite.connection_string, fleet.container, metrics=StorageMetrics()
    )
    await store.write_text(TEAMS_CHATS.cursor_key(stalled.id), '{"last_ts": 42}')

    stop = asyncio.Event()
    host = ChannelHost("host", [mcp_url], token=DEV_TOKEN)
    running = asyncio.create_task(host.run(stop))
    async with httpx.AsyncClient(timeout=30) as http:
        traffic = HumanTraffic(seed, fleet.emulator.base_url, http)

        async def readyz() -> dict[str, Any]:
            response = await http.get(f"{base_url}/readyz")
            assert response.status_code == 200, (
                response.text
            )  # a stalled chat never fails readiness
            return response.json()

        async def gauge() -> str:
            text = (await http.get(f"{base_url}/metrics")).text
            [line] = [
                li for li in text.splitlines() if li.startswith("entrabot_chat_cursors_corrupt ")
            ]
            return line.split()[-1]

        async def stall_seen() -> bool:
            return (await readyz())["corrupt_chat_cursors"]["count"] == 1

        await eventually(
            stall_seen,
            "the replica reports the corrupt cursor",
            timeout_s=SLOW_WAIT_S,
            poll_s=SLOW_POLL_S,
        )
        body = await readyz()
        assert body["ready"] is True and body["problems"] == []
        assert body["corrupt_chat_cursors"]["chat_ids"] == [stalled.id]
        assert await gauge() == "1.0"

        during = await traffic.post_chat(ada, stalled.id, "posted while the chat is stalled")
        elsewhere = await traffic.post_chat(ada, healthy.id, "posted in a healthy chat")

        async def delivered(message_id: str) -> bool:
            return any(p.message_id == message_id for p in host.pushes)

        await eventually(
            lambda: delivered(elsewhere.message_id),
            "the healthy chat is still served",
            timeout_s=SLOW_WAIT_S,
            poll_s=SLOW_POLL_S,
        )
        assert not any(p.chat_id == stalled.id for p in host.pushes)

        result = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "service.cli", "repair-chat", stalled.id, "--yes"],
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        assert "repaired:" in result.stdout

        async def stall_cleared() -> bool:
            return (await readyz())["corrupt_chat_cursors"]["count"] == 0

        await eventually(
            stall_cleared,
            "the replica sees the repaired cursor",
            timeout_s=SLOW_WAIT_S,
            poll_s=SLOW_POLL_S,
        )
        assert await gauge() == "0.0"

        after = await traffic.post_chat(ada, stalled.id, "posted after the repair")
        await eventually(
            lambda: delivered(after.message_id),
            "the repaired chat is served again",
            timeout_s=SLOW_WAIT_S,
            poll_s=SLOW_POLL_S,
        )
        # What the chat held at the repair (history, and the message posted during the stall) is
        # never pushed; what came after is, once.
        from_stalled = [p.message_id for p in host.pushes if p.chat_id == stalled.id]
        assert from_stalled == [after.message_id]
    stop.set()
    await asyncio.wait_for(running, 10)
    await store.aclose()

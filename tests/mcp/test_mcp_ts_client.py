"""The TypeScript MCP SDK (npm, pinned in tests/mcp/ts-client) as a host against the live server."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from service.delivery.hub import DispatchOutcome
from service.mcp.sdk_adapter import CHANNEL_CAPABILITY
from tests.mcp.server_fixture import WAIT_BOUND_S, LiveMcp, chat_message, eventually

TS_CLIENT_DIR = Path(__file__).parent / "ts-client"
PUSHES = 3


@pytest.fixture(scope="session")
def ts_client_dir() -> Path:
    """The pinned TypeScript client, installed from its lockfile once if ``make setup`` has not yet."""
    if not (TS_CLIENT_DIR / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir():
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail(
                "npm is not installed; install Node.js 20+ (the MCP and Azurite tests need it)"
            )
        subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=TS_CLIENT_DIR,
            check=True,
            timeout=300,
        )
    return TS_CLIENT_DIR


async def _read_event(stdout: asyncio.StreamReader, name: str) -> dict[str, Any]:
    while True:
        line = await stdout.readline()
        if not line:
            raise AssertionError(f"the TypeScript client exited before printing {name!r}")
        event = json.loads(line)
        if event.get("event") == name:
            return event


async def test_typescript_host_lists_calls_and_receives_pushes(
    live: LiveMcp, ts_client_dir: Path
) -> None:
    node = shutil.which("node")
    assert node is not None, "node is not installed"
    process = await asyncio.create_subprocess_exec(
        node,
        "push_client.mjs",
        live.url,
        str(PUSHES),
        str(int(WAIT_BOUND_S * 1000)),
        cwd=ts_client_dir,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(3 * WAIT_BOUND_S):
            assert process.stdout is not None
            ready = await _read_event(process.stdout, "ready")
            assert ready["protocolVersion"] == "2025-11-25"
            assert ready["tools"] == ["echo", "wait_for_sponsor"]
            assert ready["echo"] == {
                "text": "from typescript",
                "session_id": ready["sessionId"],
                "push_capable": True,
            }
            assert CHANNEL_CAPABILITY in ready["experimental"]

            [target] = await eventually(live.push_targets, "the TypeScript host's push stream")
            assert target.target_id == f"push:{ready['sessionId']}"
            messages = [chat_message(f"ts-{i}") for i in range(PUSHES)]
            dispatched = await live.hub.dispatch(messages)
            assert [d.outcome for d in dispatched] == [DispatchOutcome.DELIVERED] * PUSHES

            done = await _read_event(process.stdout, "done")
            assert [p["meta"]["message_id"] for p in done["pushes"]] == [
                m.message_id for m in messages
            ]
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    # The client terminated its session on the way out.
    await eventually(
        lambda: not live.mcp.sessions.sessions(), "the TypeScript host's session to end"
    )
    assert live.push_targets() == []

"""The TypeScript MCP SDK's stdio client (npm, pinned in tests/mcp/ts-client) as the bridge's host."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from pathlib import Path

from service.bridge.host_server import SERVER_NAME
from service.mcp.sdk_adapter import CHANNEL_CAPABILITY
from service.delivery.hub import DispatchOutcome
from tests.bridge.bridge_host import REPO_ROOT
from tests.mcp.server_fixture import WAIT_BOUND_S, LiveMcp, chat_message, eventually
from tests.mcp.test_mcp_ts_client import _read_event, ts_client_dir  # noqa: F401 - a fixture, used by name

PUSHES = 3


async def test_typescript_stdio_host_lists_calls_and_receives_pushes(
    live: LiveMcp, ts_client_dir: Path, tmp_path: Path  # noqa: F811 - the fixture imported above
) -> None:
    node = shutil.which("node")
    assert node is not None, "node is not installed"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENTRABOT_")}
    env.update({"PYTHONPATH": str(REPO_ROOT), "ENTRABOT_BRIDGE_TOKEN": "bridge-test-token"})
    bridge = [sys.executable, "-m", "service.cli", "channel", "--fleet-url", live.url, "--push"]
    with open(tmp_path / "bridge.log", "wb") as errlog:
        process = await asyncio.create_subprocess_exec(
            node, "stdio_channel_client.mjs", str(PUSHES), str(int(WAIT_BOUND_S * 1000)), "echo",
            '{"text": "from typescript"}', "--", *bridge,
            cwd=ts_client_dir, env=env, stdout=asyncio.subprocess.PIPE, stderr=errlog,
        )
        try:
            async with asyncio.timeout(6 * WAIT_BOUND_S):
                assert process.stdout is not None
                ready = await _read_event(process.stdout, "ready")
                assert ready["server"] == SERVER_NAME
                assert ready["tools"] == ["echo", "wait_for_sponsor"]
                assert ready["called"]["text"] == "from typescript" and ready["called"]["push_capable"] is True
                assert CHANNEL_CAPABILITY in ready["experimental"]

                await eventually(live.push_targets, "the bridge's push stream on the replica")
                messages = [chat_message(f"ts-stdio-{i}") for i in range(PUSHES)]
                dispatched = await live.hub.dispatch(messages)
                assert [d.outcome for d in dispatched] == [DispatchOutcome.DELIVERED] * PUSHES

                done = await _read_event(process.stdout, "done")
                assert [p["meta"]["message_id"] for p in done["pushes"]] == [m.message_id for m in messages]
                assert await process.wait() == 0
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    # The bridge closed its fleet session when the host went away.
    await eventually(lambda: not live.mcp.sessions.sessions(), "the bridge's fleet session to end")
    # Its stderr is JSON lines only, and the token never appears in them.
    lines = (tmp_path / "bridge.log").read_text().splitlines()
    assert lines and all(isinstance(json.loads(line), dict) for line in lines)
    assert not any("bridge-test-token" in line for line in lines)

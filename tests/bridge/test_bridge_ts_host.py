"""The TypeScript MCP SDK's stdio client (npm, pinned in tests/mcp/ts-client) as the bridge's host."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from service.bridge.host_server import SERVER_NAME
from service.delivery.hub import DispatchOutcome
from service.mcp.sdk_adapter import CHANNEL_CAPABILITY
from tests.bridge.ts_stdio_host import typescript_stdio_host
from tests.mcp.server_fixture import WAIT_BOUND_S, LiveMcp, chat_message, eventually
from tests.mcp.test_mcp_ts_client import _read_event, ts_client_dir  # noqa: F401 - a fixture, used by name

PUSHES = 3


async def test_typescript_stdio_host_lists_calls_and_receives_pushes(
    live: LiveMcp,
    ts_client_dir: Path,
    tmp_path: Path,  # noqa: F811 - the fixture imported above
) -> None:
    async with (
        typescript_stdio_host(
            ts_client_dir,
            live.url,
            tmp_path / "bridge.log",
            token="bridge-test-token",
            pushes=PUSHES,
            wait_s=WAIT_BOUND_S,
            tool="echo",
            tool_args={"text": "from typescript"},
        ) as process,
        asyncio.timeout(6 * WAIT_BOUND_S),
    ):
        assert process.stdout is not None
        ready = await _read_event(process.stdout, "ready")
        assert ready["server"] == SERVER_NAME
        assert ready["tools"] == ["echo", "wait_for_sponsor"]
        assert (
            ready["called"]["text"] == "from typescript" and ready["called"]["push_capable"] is True
        )
        assert CHANNEL_CAPABILITY in ready["experimental"]

        await eventually(live.push_targets, "the bridge's push stream on the replica")
        messages = [chat_message(f"ts-stdio-{i}") for i in range(PUSHES)]
        dispatched = await live.hub.dispatch(messages)
        assert [d.outcome for d in dispatched] == [DispatchOutcome.DELIVERED] * PUSHES

        done = await _read_event(process.stdout, "done")
        assert [p["meta"]["message_id"] for p in done["pushes"]] == [m.message_id for m in messages]
        assert await process.wait() == 0
    # The bridge closed its fleet session when the host went away.
    await eventually(lambda: not live.mcp.sessions.sessions(), "the bridge's fleet session to end")
    # Its stderr is JSON lines only, and the token never appears in them.
    lines = (tmp_path / "bridge.log").read_text().splitlines()
    assert lines and all(isinstance(json.loads(line), dict) for line in lines)
    assert not any("bridge-test-token" in line for line in lines)

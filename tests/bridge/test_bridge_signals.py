"""How Claude Code stops the bridge: SIGINT, then SIGTERM 0.1 s later, with stdin left open
(measured with Claude Code 2.1.332). The bridge must close its fleet session on the way out, or every
`claude mcp list` and `claude -p` run leaves a session on the replica until its idle timeout."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import pytest

from tests.bridge.bridge_host import bridge_parameters
from tests.mcp.server_fixture import LiveMcp, eventually

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "claude-code", "version": "test"},
    },
}


async def start_bridge(live: LiveMcp, stderr_path: Path) -> asyncio.subprocess.Process:
    parameters = bridge_parameters(live.url, token="bridge-test-token")
    with open(stderr_path, "wb") as errlog:
        process = await asyncio.create_subprocess_exec(
            parameters.command,
            *parameters.args,
            env=parameters.env,
            cwd=parameters.cwd,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=errlog,
        )
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write((json.dumps(INITIALIZE) + "\n").encode())
    await process.stdin.drain()
    answer = json.loads(await asyncio.wait_for(process.stdout.readline(), 30))
    assert answer["id"] == 1 and "result" in answer
    return process


@pytest.mark.parametrize(
    "signals",
    [(signal.SIGINT, signal.SIGTERM), (signal.SIGTERM,)],
    ids=["sigint-then-sigterm", "sigterm"],
)
async def test_a_signalled_bridge_closes_its_fleet_session_with_stdin_still_open(
    live: LiveMcp, tmp_path: Path, signals: tuple[signal.Signals, ...]
) -> None:
    process = await start_bridge(live, tmp_path / "bridge.log")  # at INFO: bridge_parameters
    try:
        await eventually(live.mcp.sessions.sessions, "the bridge's fleet session on the replica")
        for number in signals:
            try:
                process.send_signal(number)
            except ProcessLookupError:
                break  # it was already gone: closed within Claude Code's 0.1 s
            await asyncio.sleep(0.1)  # Claude Code's gap between its SIGINT and its SIGTERM
        # stdin stays open, as Claude Code leaves it
        code = await asyncio.wait_for(process.wait(), 10)
        assert code == 0, (
            f"the bridge should exit cleanly on {[s.name for s in signals]}, got {code}"
        )
        await eventually(
            lambda: not live.mcp.sessions.sessions(),
            "the fleet session closed by the bridge (DELETE)",
            timeout_s=5,
        )
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert "signal" in (tmp_path / "bridge.log").read_text()

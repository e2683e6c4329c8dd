"""The README's two recipes connect the real Claude Code to the fleet through the bridge, and leave no
fleet session behind when Claude Code exits."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
from claude_home import CLAUDE_CODE_VERSION
from loopback_netns import loopback_only, namespace_available

from tests.claude_code.claude_kit import REPO_ROOT, ClaudeStack, debug_log
from tests.mcp.server_fixture import eventually

pytestmark = [
    pytest.mark.slow,
    pytest.mark.fleet,
    pytest.mark.azurite,
    pytest.mark.asyncio(loop_scope="module"),
]


def _connected(listing: str) -> bool:
    return any(
        line.startswith("entrabot:") and "Connected" in line for line in listing.splitlines()
    )


async def test_the_readme_mcp_json_recipe_connects(
    claude_stack: ClaudeStack, tmp_path: Path
) -> None:
    home = claude_stack.home(tmp_path)
    home.mcp_json({"entrabot": claude_stack.bridge_server("--push")})
    code, out, err = await claude_stack.run(home, "mcp", "list")
    assert code == 0, f"claude {CLAUDE_CODE_VERSION} mcp list failed: {err}"
    assert _connected(out), (
        f"Claude Code {CLAUDE_CODE_VERSION} no longer shows the .mcp.json bridge as "
        f"Connected:\n{out}\n{debug_log(home)[-3000:]}"
    )


async def test_the_readme_claude_mcp_add_recipe_connects(
    claude_stack: ClaudeStack, tmp_path: Path
) -> None:
    home = claude_stack.home(tmp_path)
    server = claude_stack.bridge_server("--push")
    code, _, err = await claude_stack.run(
        home,
        "mcp",
        "add",
        "entrabot",
        "-e",
        f"ENTRABOT_BRIDGE_TOKEN_FILE={server['env']['ENTRABOT_BRIDGE_TOKEN_FILE']}",
        "--",
        server["command"],
        *server["args"],
    )
    assert code == 0, (
        f"claude {CLAUDE_CODE_VERSION} mcp add no longer takes the README's form: {err}"
    )
    code, out, err = await claude_stack.run(home, "mcp", "list")
    assert code == 0 and _connected(out), (
        f"Claude Code {CLAUDE_CODE_VERSION} no longer shows the `claude mcp add` bridge as Connected:\n{out}{err}"
    )


async def test_the_bridge_closes_its_fleet_session_when_claude_mcp_list_exits(
    claude_stack: ClaudeStack, tmp_path: Path
) -> None:
    # Claude Code stops a stdio server with SIGINT, then SIGTERM 0.1 s later, stdin still open
    # (TOOLCHAIN.md): the bridge must still end its fleet session on the way out.
    home = claude_stack.home(tmp_path)
    home.mcp_json({"entrabot": claude_stack.bridge_server("--push")})
    code, out, _ = await claude_stack.run(home, "mcp", "list")
    assert code == 0 and _connected(out)

    async def closed() -> bool:
        return (
            await claude_stack.open_sessions() == 0
        )  # the module's tests run one Claude Code at a time

    await eventually(closed, "no fleet session left open after `claude mcp list`", timeout_s=15)


async def test_claude_code_runs_where_only_the_fleet_and_the_model_api_are_reachable(
    claude_stack: ClaudeStack, tmp_path: Path
) -> None:
    if not namespace_available():
        pytest.skip(
            "not root with unshare -n: Claude Code runs on the host network, given loopback addresses only"
        )
    emulator = claude_stack.fleet.fleet.emulator
    assert emulator is not None
    probe = (
        "import socket, sys\n"
        "def reach(port):\n"
        "    try:\n"
        "        socket.create_connection(('127.0.0.1', port), timeout=3).close(); return 1\n"
        "    except OSError:\n"
        "        return 0\n"
        "print(*[reach(int(p)) for p in sys.argv[1:]])\n"
    )
    emulator_port = int(emulator.base_url.rsplit(":", 1)[1].split("/")[0])
    ports = [claude_stack.fleet.balancer.port, claude_stack.api.port, emulator_port]
    process = await asyncio.create_subprocess_exec(
        *loopback_only(
            [sys.executable, "-c", probe, *map(str, ports)],
            claude_stack.sockets,
            claude_stack.ports(),
        ),
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await process.communicate()
    assert out.decode().split() == ["1", "1", "0"], (
        "inside the namespace: the fleet and the API only"
    )

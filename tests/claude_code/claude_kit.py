"""The real Claude Code (npm, pinned in tests/claude_code/host) driving the bridge against a real fleet.

One stack per test module: replica processes on Azurite and the Graph emulator behind the loopback
balancer (tests/bridge/fleet_stack.py), the fake Messages API (tests/support/fake_anthropic.py), and
Claude Code itself run in a loopback-only network namespace that reaches just those two ports
(tests/support/loopback_netns.py). Each test seeds its own throwaway HOME and project folder.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from claude_home import CLAUDE_CODE_VERSION, ClaudeHome, claude_environment, seed_claude_home
from fake_anthropic import API_KEY, FakeAnthropic
from loopback_netns import loopback_only

from service.devstack.fleet import DEV_TOKEN
from tests.bridge.fleet_stack import BridgeFleet

HOST_DIR = Path(__file__).resolve().parent / "host"
CLAUDE_BIN = HOST_DIR / "node_modules" / ".bin" / "claude"
REPO_ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent  # where `entrabot-fleet` is, as the README's recipes name it
RUN_TIMEOUT_S = 120.0
SESSIONS_METRIC = re.compile(r"^entrabot_mcp_sessions (\S+)$", re.M)


@dataclass
class ClaudeStack:
    fleet: BridgeFleet
    api: FakeAnthropic
    sockets: Path
    token_file: Path

    @property
    def fleet_url(self) -> str:
        return self.fleet.balancer.url()

    def ports(self) -> list[int]:
        return [self.api.port, self.fleet.balancer.port]

    def bridge_server(self, *args: str) -> dict[str, Any]:
        """The README's ``.mcp.json`` entry, pointed at this fleet."""
        return {
            "command": "entrabot-fleet",
            "args": ["channel", "--fleet-url", self.fleet_url, *args],
            "env": {"ENTRABOT_BRIDGE_TOKEN_FILE": str(self.token_file)},
        }

    def home(self, root: Path, *, allow: tuple[str, ...] = ()) -> ClaudeHome:
        return seed_claude_home(root, api_key=API_KEY, allow=allow)

    def environment(self, home: ClaudeHome) -> dict[str, str]:
        env = claude_environment(
            home, api_base_url=self.api.base_url, api_key=API_KEY, path_prefix=VENV_BIN
        )
        env["PYTHONPATH"] = str(REPO_ROOT)  # the namespace runner is a module of this repository
        return env

    def command(self, *args: str, debug: bool = True, home: ClaudeHome | None = None) -> list[str]:
        extra = ["--debug-file", str(home.debug_log)] if debug and home is not None else []
        return loopback_only([str(CLAUDE_BIN), *extra, *args], self.sockets, self.ports())

    async def run(
        self, home: ClaudeHome, *args: str, timeout_s: float = RUN_TIMEOUT_S
    ) -> tuple[int, str, str]:
        """Run ``claude ARGS`` in the project folder to its end: (exit code, stdout, stderr)."""
        process = await asyncio.create_subprocess_exec(
            *self.command(*args, home=home),
            cwd=home.project,
            env=self.environment(home),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            async with asyncio.timeout(timeout_s):
                out, err = await process.communicate()
        except TimeoutError:
            process.kill()
            await process.wait()
            raise AssertionError(
                f"claude {' '.join(args)} did not finish within {timeout_s:.0f} s; "
                f"its debug log: {home.debug_log}"
            ) from None
        assert process.returncode is not None
        return process.returncode, out.decode(errors="replace"), err.decode(errors="replace")

    async def sessions_by_replica(self) -> dict[str, float]:
        """MCP sessions open on each live replica, from its /metrics."""
        counts: dict[str, float] = {}
        async with httpx.AsyncClient(timeout=10) as http:
            for member in self.fleet.fleet.members:
                if member.alive:
                    found = SESSIONS_METRIC.search(
                        (await http.get(f"{member.base_url}/metrics")).text
                    )
                    counts[member.name] = float(found.group(1)) if found else 0.0
        return counts

    async def open_sessions(self) -> float:
        """MCP sessions open across the fleet's replicas."""
        return sum((await self.sessions_by_replica()).values())


def write_token_file(path: Path) -> Path:
    path.write_text(DEV_TOKEN)
    os.chmod(path, 0o600)
    return path


def debug_log(home: ClaudeHome) -> str:
    return (
        home.debug_log.read_text(errors="replace") if home.debug_log.exists() else "(no debug log)"
    )


@dataclass
class InteractiveClaude:
    """One interactive Claude Code in a detached tmux session."""

    session: str
    home: ClaudeHome

    async def tmux(self, *args: str) -> str:
        process = await asyncio.create_subprocess_exec(
            "tmux", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        out, _ = await process.communicate()
        return out.decode(errors="replace")

    async def screen(self) -> str:
        return await self.tmux("capture-pane", "-p", "-t", self.session)

    async def confirm_channels(self, timeout_s: float = 60.0) -> None:
        """Answer the development-channels confirmation (Enter) until Claude Code registers the channel."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while CHANNEL_REGISTERED not in debug_log(self.home):
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(
                    f"Claude Code {CLAUDE_CODE_VERSION} never logged {CHANNEL_REGISTERED!r} (channels flag, or the "
                    f"confirmation changed?); screen:\n{await self.screen()}\n{debug_log(self.home)[-3000:]}"
                )
            await self.tmux("send-keys", "-t", self.session, "Enter")
            await asyncio.sleep(1.5)


CHANNEL_REGISTERED = "Channel notifications registered"


@asynccontextmanager
async def interactive_claude(
    stack: ClaudeStack, home: ClaudeHome, *args: str
) -> AsyncIterator[InteractiveClaude]:
    """``claude ARGS`` in tmux; its environment goes through a launcher script (tmux's own server
    environment would leak in otherwise)."""
    env = {**stack.environment(home), "TERM": "screen-256color"}
    launcher = home.home / "launch.sh"
    launcher.write_text(
        "#!/bin/sh\nexec env -i "
        + " ".join(shlex.quote(f"{k}={v}") for k, v in env.items())
        + " "
        + " ".join(shlex.quote(a) for a in stack.command(*args, home=home))
        + "\n"
    )
    launcher.chmod(0o700)
    claude = InteractiveClaude(f"claude-{uuid.uuid4().hex[:8]}", home)
    await claude.tmux(
        "new-session",
        "-d",
        "-s",
        claude.session,
        "-x",
        "200",
        "-y",
        "50",
        "-c",
        str(home.project),
        str(launcher),
    )
    try:
        yield claude
    finally:
        await claude.tmux("kill-session", "-t", claude.session)

"""The real OpenAI Codex CLI (npm, pinned in tests/codex/host) as an MCP host of a real fleet.

Each session has its own fake Responses API (tests/support/fake_responses.py) with the test's policy,
its own recording proxy in front of one replica's ``/mcp`` (mcp_recorder.py), and a throwaway HOME and
CODEX_HOME whose config.toml names both. ``codex exec`` runs in a loopback-only network namespace that
reaches just those two ports (tests/support/loopback_netns.py), in a process group of its own that is
killed when the run ends.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fake_responses import API_KEY, FakeModel, FakeResponses, Policy, fake_responses
from loopback_netns import loopback_only, unix_forwards

from service.devstack.fleet import DEV_TOKEN
from tests.codex.mcp_recorder import McpRecorder, mcp_recorder

HOST_DIR = Path(__file__).resolve().parent / "host"
CODEX_BIN = HOST_DIR / "node_modules" / ".bin" / "codex"
CODEX_VERSION = "0.171.0"  # the pin in tests/codex/host/package.json
REPO_ROOT = Path(__file__).resolve().parents[2]
SERVER = "fleet"  # the [mcp_servers.<name>]: Codex offers its tools as namespace mcp__fleet
TOKEN_ENV = "ENTRABOT_FLEET_TOKEN"
MODEL_KEY_ENV = "FAKE_OPENAI_API_KEY"
RUN_TIMEOUT_S = 60.0
CLIENT_NAME = "codex-mcp-client"  # the clientInfo name Codex 0.171.0 gives (measured)


def codex_missing() -> str | None:
    """Why Codex cannot run here, or None."""
    if not CODEX_BIN.exists():
        return (
            f"the OpenAI Codex CLI {CODEX_VERSION} is not installed in {HOST_DIR}: `make setup` runs "
            "npm ci there (it needs the npm registry once)"
        )
    return None


@dataclass(frozen=True)
class CodexOptions:
    # Codex's own default is 60 s; a test of its timeout makes it short.
    tool_timeout_s: float = 60.0
    startup_timeout_s: float = 20.0


def _toml(value: str) -> str:
    return json.dumps(value)  # a JSON string is a TOML basic string for what is written here


def config_toml(model_base_url: str, mcp_url: str, options: CodexOptions) -> str:
    """The fake provider (no retries: a fault must show, not be retried away) and the fleet."""
    return "\n".join(
        [
            'model = "fake-model"',
            'model_provider = "fake"',
            'approval_policy = "never"',
            "check_for_update_on_startup = false",
            "[analytics]",
            "enabled = false",
            "[feedback]",
            "enabled = false",
            "[model_providers.fake]",
            'name = "fake"',
            f"base_url = {_toml(model_base_url + '/v1')}",
            f"env_key = {_toml(MODEL_KEY_ENV)}",
            'wire_api = "responses"',
            "request_max_retries = 0",
            "stream_max_retries = 0",
            f"[mcp_servers.{SERVER}]",
            f"url = {_toml(mcp_url)}",
            f"bearer_token_env_var = {_toml(TOKEN_ENV)}",
            f"tool_timeout_sec = {options.tool_timeout_s:g}",
            f"startup_timeout_sec = {options.startup_timeout_s:g}",
            # Per server, not top level (Codex 0.171.0 ignores it there): without it `codex exec` with
            # approval_policy "never" refuses every MCP call.
            'default_tools_approval_mode = "approve"',
            "",
        ]
    )


@dataclass(frozen=True)
class CodexResult:
    code: int
    stdout: str
    stderr: str

    def events(self) -> list[dict[str, Any]]:
        """``--json``'s events, one JSON object a line (other lines skipped)."""
        found: list[dict[str, Any]] = []
        for line in self.stdout.splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                found.append(event)
        return found

    def tool_calls(self) -> list[dict[str, Any]]:
        """The finished ``mcp_tool_call`` items, with status and result (or error)."""
        return [
            e["item"]
            for e in self.events()
            if e.get("type") == "item.completed" and e["item"].get("type") == "mcp_tool_call"
        ]

    def describe(self) -> str:
        return f"codex exited {self.code}\n{self.stdout[-3000:]}\n{self.stderr[-3000:]}"


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # nothing left of the group


@dataclass
class CodexSession:
    home: Path
    api: FakeResponses
    recorder: McpRecorder
    sockets: Path

    @property
    def model(self) -> FakeModel:
        return self.api.model

    def environment(self) -> dict[str, str]:
        """Only what Codex needs: none of this process's settings or credentials reach it."""
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "CODEX_HOME": str(self.home / ".codex"),
            MODEL_KEY_ENV: API_KEY,
            TOKEN_ENV: DEV_TOKEN,
            "PYTHONPATH": str(REPO_ROOT),  # the namespace runner is a module of this repository
            "LANG": "C.UTF-8",
        }

    def command(self, prompt: str) -> list[str]:
        # --disable plugins: at start Codex tries GitHub and a hosted backend to sync plugins.
        codex = [str(CODEX_BIN), "exec", "--skip-git-repo-check", "--ephemeral", "--json"]
        codex += ["--strict-config", "--disable", "plugins", prompt]
        return loopback_only(codex, self.sockets, [self.api.port, self.recorder.port])

    async def run(self, prompt: str, *, timeout_s: float = RUN_TIMEOUT_S) -> CodexResult:
        """``codex exec PROMPT`` to its end; its whole process group is killed when it ends or times out."""
        process = await asyncio.create_subprocess_exec(
            *self.command(prompt),
            cwd=self.home,
            env=self.environment(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        try:
            async with asyncio.timeout(timeout_s):
                out, err = await process.communicate()
        except TimeoutError:
            raise AssertionError(
                f"codex exec did not finish within {timeout_s:.0f} s; the model was asked "
                f"{len(self.model.requests)} times, the fleet saw {len(self.recorder.exchanges)} requests"
            ) from None
        finally:
            _kill_group(process.pid)
            await process.wait()
        assert process.returncode is not None
        return CodexResult(
            process.returncode, out.decode(errors="replace"), err.decode(errors="replace")
        )


@asynccontextmanager
async def codex_session(
    mcp_url: str, policy: Policy, options: CodexOptions = CodexOptions()
) -> AsyncIterator[CodexSession]:
    """A fresh HOME, model and recording proxy for one or more ``codex exec`` runs against ``mcp_url``."""
    # A short folder of its own: Unix socket paths (the namespace's relays) must stay under 108 bytes.
    root = Path(tempfile.mkdtemp(prefix="codex-"))
    try:
        async with (
            fake_responses(FakeModel(policy)) as api,
            mcp_recorder(mcp_url) as recorder,
            unix_forwards(root / "s", [api.port, recorder.port]),
        ):
            home = root / "home"
            (home / ".codex").mkdir(parents=True)
            (home / ".codex" / "config.toml").write_text(
                config_toml(api.base_url, recorder.url, options)
            )
            yield CodexSession(home, api, recorder, root / "s")
    finally:
        shutil.rmtree(root, ignore_errors=True)

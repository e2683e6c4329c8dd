"""The bridge tells the model (tool result, tools/list error) and the person (one stderr line) why the
fleet refuses it: a wrong token names the setting to fix, a closed port names the URL and says nothing
was sent, a token without the fleet's role names what it lacks.

The bridge runs as ``python -m service.cli channel`` under the MCP SDK's stdio client; the fleet is a
live /mcp server (uvicorn) with its real bearer check, or the Graph+Entra emulator's tokens.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path

import httpx
import pytest
from mcp.client import Client
from mcp.shared.exceptions import MCPError
from starlette.types import ASGIApp, Receive, Scope, Send

from emulator.seed import build_seed
from emulator.server import start_emulator
from service.bridge.config import TOKEN_ENV, TOKEN_FILE_ENV
from tests.bridge.bridge_host import REPO_ROOT, bridge_host
from tests.bridge.broken_fleet import Fault, broken_fleet
from tests.mcp.server_fixture import eventually, live_mcp, mcp_settings

RIGHT_TOKEN = "the-fleets-token-3b8e"
WRONG_TOKEN = "a-stale-token-90c2"
# The bridge waits up to 10 s for a session before answering; a known cause must come well before.
PROMPT_S = 5.0


def _text(result: object) -> str:
    [text] = [c.text for c in getattr(result, "content") if c.type == "text"]
    return str(text)


def _warnings(log: Path) -> list[str]:
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    return [str(line.get("reason")) for line in lines if line.get("level") == "WARNING"]


class _Counted:
    """Counts the requests reaching /mcp, to know the bridge has retried."""

    def __init__(self) -> None:
        self.requests = 0

    def __call__(self, app: ASGIApp) -> ASGIApp:
        return _Counting(self, app)


class _Counting:
    # An object, not a function: Starlette's Route takes a plain function for a GET endpoint.
    def __init__(self, counter: _Counted, app: ASGIApp) -> None:
        self._counter = counter
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._counter.requests += 1
        await self._app(scope, receive, send)


async def _list_tools_error(client: Client) -> str:
    started = time.monotonic()
    with pytest.raises(MCPError) as refused:
        await client.list_tools()
    assert time.monotonic() - started < PROMPT_S
    return refused.value.error.message


@pytest.mark.parametrize("given_as", ["variable", "file"])
async def test_a_wrong_token_is_named_in_the_tool_list_error_and_the_tool_result_and_said_once(
    given_as: str, tmp_path: Path
) -> None:
    log = tmp_path / "bridge.log"
    token_file = tmp_path / "fleet-token"
    token_file.write_text(WRONG_TOKEN)
    token_file.chmod(0o600)
    env = {} if given_as == "variable" else {TOKEN_FILE_ENV: str(token_file)}
    setting = TOKEN_ENV if given_as == "variable" else f"{TOKEN_FILE_ENV}={token_file}"
    counted = _Counted()
    settings = mcp_settings(mcp_static_tokens=RIGHT_TOKEN)
    async with live_mcp(settings, wrap_mcp=counted) as live:
        token = WRONG_TOKEN if given_as == "variable" else ""
        async with bridge_host(live.url, log, token=token, args=(), env=env) as (client, _):
            for said in (await _list_tools_error(client), _text(await _call(client))):
                assert f"the fleet at {live.url} refused the bridge's token (401)" in said
                assert setting in said and "ENTRABOT_MCP_STATIC_TOKENS" in said
            assert "the call was not sent" in said
            await eventually(lambda: counted.requests >= 3, "two retries", timeout_s=10)
            warnings = _warnings(log)
    # One line for the person, however often the bridge retried; the token never in it.
    assert len(warnings) == 1 and "401" in warnings[0] and setting in warnings[0], warnings
    assert WRONG_TOKEN not in log.read_text()


async def _call(client: Client) -> object:
    started = time.monotonic()
    result = await client.call_tool("echo", {"text": "hello"})
    assert result.is_error and time.monotonic() - started < PROMPT_S
    return result


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_closed_port_is_named_by_its_url_as_not_reachable_with_nothing_sent(
    tmp_path: Path,
) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/mcp"
    log = tmp_path / "bridge.log"
    async with bridge_host(url, log, args=()) as (client, _):
        for said in (await _list_tools_error(client), _text(await _call(client))):
            assert f"the fleet at {url} is not reachable" in said and "nothing was sent" in said
            assert "refused the session" not in said and "may or may not" not in said
    assert any(f"{url} is not reachable" in w for w in _warnings(log))


async def test_a_call_after_the_fleet_went_down_says_it_was_not_sent(tmp_path: Path) -> None:
    """A connection that never opened cannot have run the call: not "may or may not have run"."""
    log = tmp_path / "bridge.log"
    async with AsyncExitStack() as bridge:
        replica = AsyncExitStack()
        bridge.push_async_callback(replica.aclose)  # after the bridge's own exit, if not before
        live = await replica.enter_async_context(
            live_mcp(mcp_settings(mcp_static_tokens=RIGHT_TOKEN))
        )
        client, _ = await bridge.enter_async_context(
            bridge_host(live.url, log, token=RIGHT_TOKEN, args=())
        )
        assert not (await client.call_tool("echo", {"text": "up"})).is_error
        await replica.aclose()  # the replica goes; the bridge and its session stay
        said = _text(await client.call_tool("echo", {"text": "down"}))
    assert f"the fleet at {live.url} is not reachable" in said and "nothing was sent" in said
    assert "may or may not" not in said


class _Revoking:
    """Once ``revoked``, the bridge's token reaches the replica's bearer check as a stale one: what
    rotating ``ENTRABOT_MCP_STATIC_TOKENS`` under a running bridge does."""

    def __init__(self) -> None:
        self.revoked = False

    def __call__(self, app: ASGIApp) -> ASGIApp:
        return _Revoked(self, app)


class _Revoked:
    def __init__(self, switch: _Revoking, app: ASGIApp) -> None:
        self._switch = switch
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._switch.revoked and scope["type"] == "http":
            stale = [(k, v) for k, v in scope["headers"] if k != b"authorization"]
            scope = {
                **scope,
                "headers": [*stale, (b"authorization", f"Bearer {WRONG_TOKEN}".encode())],
            }
        await self._app(scope, receive, send)


async def test_a_token_refused_in_session_is_named_in_each_call_and_said_once(
    tmp_path: Path,
) -> None:
    log = tmp_path / "bridge.log"
    switch = _Revoking()
    settings = mcp_settings(mcp_static_tokens=RIGHT_TOKEN)
    async with live_mcp(settings, wrap_mcp=switch) as live:
        async with bridge_host(live.url, log, token=RIGHT_TOKEN, args=()) as (client, _):
            assert not (await client.call_tool("echo", {"text": "accepted"})).is_error
            switch.revoked = True
            for _ in range(2):
                said = _text(await _call(client))
                assert f"the fleet at {live.url} refused the bridge's token (401)" in said, said
                assert TOKEN_ENV in said and "the call was not run" in said
            warnings = _warnings(log)
    assert len(warnings) == 1 and "401" in warnings[0], warnings


async def test_a_token_without_the_fleets_role_is_told_what_it_lacks(tmp_path: Path) -> None:
    role = "Entrabot.Host"
    audience = "api://entrabot-fleet-test"
    with start_emulator(build_seed(chats=1)) as emulator:
        async with httpx.AsyncClient(timeout=10) as http:
            minted = await http.post(
                f"{emulator.base_url}/_emulator/tokens/api", json={"audience": audience}
            )
        token = minted.json()["access_token"]
        settings = mcp_settings(
            authority=emulator.base_url,
            tenant_id=emulator.seed.tenant_id,
            mcp_jwt_audience=audience,
            mcp_jwt_required_roles=role,
        )
        log = tmp_path / "bridge.log"
        async with live_mcp(settings) as live:
            async with bridge_host(live.url, log, token=token, args=()) as (client, _):
                said = _text(await _call(client))
    assert "(403 insufficient_scope)" in said and role in said and TOKEN_ENV in said, said
    assert token not in log.read_text()


async def test_a_fleet_answering_503_is_said_with_its_status(tmp_path: Path) -> None:
    async with broken_fleet(Fault.SERVER_ERROR) as fleet:
        async with bridge_host(fleet.url, tmp_path / "bridge.log", args=()) as (client, _):
            said = _text(await _call(client))
    assert f"the fleet at {fleet.url} answered 503" in said, said


@pytest.mark.parametrize(("mode", "refused"), [(0o644, True), (0o640, True), (0o600, False)])
def test_a_token_file_others_can_read_is_refused_with_the_chmod_to_run(
    mode: int, refused: bool, tmp_path: Path
) -> None:
    token_file = tmp_path / "fleet-token"
    token_file.write_text(RIGHT_TOKEN)
    token_file.chmod(mode)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ENTRABOT_")}
    environ.update({"PYTHONPATH": str(REPO_ROOT), TOKEN_FILE_ENV: str(token_file)})
    url = f"http://127.0.0.1:{_closed_port()}/mcp"
    # stdin closed at once: a bridge that accepted the file serves no host and exits 0.
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", "channel", "--fleet-url", url],
        env=environ,
        cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,  # seconds when the machine is idle; a loaded one compiles slowly
    )
    if refused:
        assert done.returncode == 2 and done.stdout == ""
        [line] = done.stderr.strip().splitlines()
        assert f"chmod 600 {token_file}" in line and f"{mode:04o}" in line
        assert RIGHT_TOKEN not in done.stderr
    else:
        assert done.returncode == 0, done.stderr
        assert "chmod" not in done.stderr

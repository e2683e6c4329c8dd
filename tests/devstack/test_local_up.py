"""``entrabot-fleet up`` and ``say`` run as the README's local recipe writes them, as processes: the URL
``up`` prints answers, a host connects with the token it prints, the bridge starts from the
``.mcp.json`` it prints, a person's ``say`` reaches the connected host, and Ctrl-C leaves nothing
running.

Everything runs in one ``up`` (one replica: ``--replicas``, which the README names); the module's
tests run in order on one worker (tests/conftest.py), the Ctrl-C test last.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from eventually import eventually
from mcp.client import Client
from mcp.client.extension import ClientExtension, NotificationBinding
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import Implementation
from pydantic import BaseModel, ConfigDict

from service.bridge.written_log import STATE_DIR_ENV
from service.mcp.hosts import BRIDGE_PUSH_CLIENT_NAME
from tests.docs.readme_recipe import (
    REPO_ROOT,
    as_run_here,
    claude_lines,
    fleet_commands,
    up_invocation,
)

pytestmark = [pytest.mark.slow, pytest.mark.azurite]

# Azurite, the emulator and a replica starting on a busy 2-core machine.
START_BOUND_S = 240.0
STOP_BOUND_S = 60.0
# A chat's first sight, a poll and the push, on a busy machine.
DELIVERY_BOUND_S = 90.0
RUNNING = "Running; Ctrl-C stops everything."


@dataclass
class RunningUp:
    proc: subprocess.Popen[str]
    env: dict[str, str]
    state_home: Path
    lines: list[str] = field(default_factory=list)
    ready: threading.Event = field(default_factory=threading.Event)

    @property
    def out(self) -> str:
        return "\n".join(self.lines)

    def printed(self, pattern: str) -> re.Match[str]:
        match = re.search(pattern, self.out, re.M)
        assert match, f"`up` printed no {pattern!r}:\n{self.out}"
        return match

    def block_after(self, heading: str, until: str) -> str:
        text = self.out
        start = text.index(heading) + len(heading)
        return text[start : text.index(until, start)]

    def run(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        """A README command, run as written, beside this ``up`` (same state folder)."""
        return subprocess.run(
            as_run_here(argv),
            env=self.env,
            cwd=self.state_home,
            capture_output=True,
            text=True,
            timeout=180,  # the CLI's imports on a busy 2-core machine
        )


def _read(running: RunningUp) -> None:
    assert running.proc.stdout is not None
    for line in running.proc.stdout:
        running.lines.append(line.rstrip("\n"))
        if line.strip() == RUNNING:
            running.ready.set()


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningUp]:
    home = tmp_path_factory.mktemp("up-state")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ENTRABOT_", "AZURE_"))}
    # `up` and `say` find each other in $XDG_STATE_HOME/entrabot-fleet/local: the README's commands
    # run exactly as written, in a folder of the test's.
    env["XDG_STATE_HOME"] = str(home)
    proc = subprocess.Popen(
        [*as_run_here(up_invocation()), "--replicas", "1"],
        env=env,
        cwd=home,  # no .env of the checkout's
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    running = RunningUp(proc, env, home)
    threading.Thread(target=_read, args=(running,), daemon=True).start()
    deadline = time.monotonic() + START_BOUND_S
    while not running.ready.wait(0.2):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"`up` did not start:\n{running.out}\n{proc.communicate()[1][-3000:]}")
    yield running
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def _descendants(pid: int) -> set[int]:
    """Every process under ``pid`` (its replicas and Azurite run in sessions of their own)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _mcp_url(up: RunningUp) -> str:
    return up.printed(r"^  replica-1 ready at (http://127\.0\.0\.1:\d+/mcp)$").group(1)


def _token(up: RunningUp) -> str:
    return up.printed(r"^  local token (\S+) ").group(1)


class _Params(BaseModel):
    model_config = ConfigDict(extra="allow")
    content: str
    meta: dict[str, Any]


class _Pushes(ClientExtension):
    identifier = "dev.entrabot/local-up-test"

    def __init__(self) -> None:
        self.received: list[_Params] = []

    def notifications(self) -> list[NotificationBinding[Any]]:
        return [
            NotificationBinding(
                method="notifications/claude/channel", params_type=_Params, handler=self._on
            )
        ]

    async def _on(self, params: _Params) -> None:
        self.received.append(params)


def test_up_prints_a_replica_url_that_answers_readyz(up: RunningUp) -> None:
    url = _mcp_url(up)
    response = httpx.get(url.removesuffix("/mcp") + "/readyz", timeout=10)
    assert response.status_code == 200, response.text


async def test_a_host_connects_with_the_token_up_printed_and_lists_the_tools(up: RunningUp) -> None:
    headers = {"Authorization": f"Bearer {_token(up)}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        client = Client(
            streamable_http_client(_mcp_url(up), http_client=http),
            mode="legacy",
            client_info=Implementation(name="codex", version="1.0"),
        )
        async with client:
            tools = {t.name for t in (await client.list_tools()).tools}
    assert {"send_teams_message", "catch_up", "whoami"} <= tools


def test_up_prints_the_readmes_claude_lines_with_its_own_url_and_paths(up: RunningUp) -> None:
    for readme_line in claude_lines():
        printed = up.printed(
            rf"^  ({re.escape(readme_line.split()[0])} .*{readme_line.split()[2]}.*)$"
        )
        ours, theirs = shlex.split(printed.group(1)), shlex.split(readme_line)
        assert len(ours) == len(theirs), (ours, theirs)
        for mine, written in zip(ours, theirs):
            if written.startswith("http://127.0.0.1:"):
                assert mine == _mcp_url(up)
            elif "/" in written:  # an absolute path (the README's is an example): same file name
                variable, _, path = written.rpartition("=")
                my_variable, _, my_path = mine.rpartition("=")
                assert my_variable == variable and Path(my_path).is_absolute()
                assert Path(my_path).name == Path(path).name
            else:
                assert mine == written


async def test_a_person_said_as_the_readme_writes_reaches_the_connected_host(up: RunningUp) -> None:
    pushes = _Pushes()
    headers = {"Authorization": f"Bearer {_token(up)}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http:
        # The channel bridge's push name, the push host a replica serves by default.
        client = Client(
            streamable_http_client(_mcp_url(up), http_client=http),
            extensions=[pushes],
            mode="legacy",
            client_info=Implementation(name=BRIDGE_PUSH_CLIENT_NAME, version="1.0"),
        )
        async with client:
            await client.list_tools()
            [say] = [argv for argv in fleet_commands() if argv[1] == "say"]
            result = up.run(say)
            assert result.returncode == 0, result.stderr
            said = re.fullmatch(
                r"posted message (\S+) in chat (\S+) as (.+) <\S+@\S+>\n", result.stdout
            )
            assert said, result.stdout
            assert say[-1] not in result.stdout + result.stderr  # ids, never the body
            message_id, chat_id, person = said.groups()
            [push] = await eventually(
                lambda: [p for p in pushes.received if p.meta["message_id"] == message_id],
                "the person's message as a push",
                timeout_s=DELIVERY_BOUND_S,
                poll_s=0.2,
            )
    assert (push.meta["chat_id"], push.meta["user"]) == (chat_id, person)
    assert say[-1] in push.content


async def test_the_mcp_json_up_printed_starts_the_bridge_with_the_fleets_tools(
    up: RunningUp, tmp_path: Path
) -> None:
    snippet = json.loads(up.block_after("in the project's .mcp.json:\n", "Connect Codex"))
    server = snippet["mcpServers"]["entrabot"]
    assert Path(server["command"]).is_absolute()
    env = {k: v for k, v in up.env.items() if k in ("PATH", "HOME", "PYTHONPATH", "LANG")}
    env.setdefault(
        "PYTHONPATH", str(REPO_ROOT)
    )  # the checkout's code, as the venv's script runs it
    env[STATE_DIR_ENV] = str(tmp_path)  # the bridge's memory, not the user's
    params = StdioServerParameters(
        command=server["command"], args=server["args"], env={**env, **server["env"]}
    )
    client = Client(
        stdio_client(params), client_info=Implementation(name="claude-code", version="2.1.332")
    )
    async with client:
        tools = {t.name for t in (await client.list_tools()).tools}
    assert {"send_teams_message", "catch_up"} <= tools


def test_say_with_nobody_of_that_name_is_a_usage_error_naming_the_people(up: RunningUp) -> None:
    result = up.run([".venv/bin/entrabot-fleet", "say", "--from", "Nobody", "hello"])
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert "--from 'Nobody'" in line and "Ada Lovelace" in line and "Traceback" not in line


def test_ctrl_c_stops_the_fleet_and_leaves_no_process(up: RunningUp) -> None:
    children = _descendants(up.proc.pid)
    assert len(children) >= 2, children  # the replica and Azurite
    state_file = up.state_home / "entrabot-fleet" / "local" / "fleet.json"
    assert state_file.is_file()
    up.proc.send_signal(signal.SIGINT)
    assert up.proc.wait(timeout=STOP_BOUND_S) == 0, up.out
    assert not [pid for pid in children if _alive(pid)]
    assert not state_file.exists()
    with pytest.raises(httpx.ConnectError):
        httpx.get(_mcp_url(up).removesuffix("/mcp") + "/readyz", timeout=5)
    result = up.run([".venv/bin/entrabot-fleet", "say", "hello"])
    assert result.returncode == 2 and "entrabot-fleet up" in result.stderr

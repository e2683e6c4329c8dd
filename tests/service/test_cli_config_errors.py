"""Every ``entrabot-fleet`` command refuses a broken setting the same way, run as a person runs it: one
line ``entrabot-fleet: <the variable or flag>: what is wrong; what to do`` on stderr, exit code 2, no
traceback, no pydantic text."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.cli import COMMANDS

OUT_OF_RANGE_PORT = {"ENTRABOT_PORT": "99999"}

# command line, the broken setting, the name the line must carry. Each command is broken in a setting
# it reads before anything else: the replica's settings, the demo's own, the bridge's, a flag.
CASES: dict[str, tuple[list[str], dict[str, str], str]] = {
    "serve": (["serve"], OUT_OF_RANGE_PORT, "ENTRABOT_PORT"),
    "doctor": (["doctor"], OUT_OF_RANGE_PORT, "ENTRABOT_PORT"),
    "repair-chat": (["repair-chat", "19:abc@thread.v2"], OUT_OF_RANGE_PORT, "ENTRABOT_PORT"),
    "signin": (["signin"], OUT_OF_RANGE_PORT, "ENTRABOT_PORT"),
    "migrate": (["migrate", "--source", "."], OUT_OF_RANGE_PORT, "ENTRABOT_PORT"),
    "persona": (["persona", "pull", "--root", "p"], OUT_OF_RANGE_PORT, "ENTRABOT_PORT"),
    "demo": (["demo", "--duration", "1"], {"ENTRABOT_AZURITE": "docker"}, "ENTRABOT_AZURITE"),
    "channel": (
        ["channel", "--fleet-url", "http://127.0.0.1:9/mcp"],
        {"ENTRABOT_BRIDGE_TOKEN_FILE": "no-such-token-file"},
        "ENTRABOT_BRIDGE_TOKEN_FILE",
    ),
    "up": (["up", "--state-dir", "state"], {"ENTRABOT_AZURITE": "docker"}, "ENTRABOT_AZURITE"),
    "say": (["say", "--state-dir", "no-fleet-here", "hello"], {}, "--emulator-url"),
    "emulator": (["emulator", "--seed", "no-such-seed.json", "--port", "0"], {}, "--seed"),
}


def run_cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("ENTRABOT_", "AZURE_"))}
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        env={**clean, **env},
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,  # a loaded CI machine: the import alone took over 100 s at load 19 on 2 cores
    )


def test_every_command_has_a_broken_setting_case() -> None:
    assert set(CASES) == {command.name for command in COMMANDS}


@pytest.mark.parametrize("command", sorted(CASES))
def test_a_broken_setting_is_one_line_naming_it_and_what_to_do_with_exit_code_2(
    command: str, tmp_path: Path
) -> None:
    args, env, name = CASES[command]
    result = run_cli(args, env, tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"entrabot-fleet: {name}"), line
    assert "; " in line  # what is wrong; what to do
    assert "Traceback" not in line and "errors.pydantic.dev" not in line
    assert "listening on" not in result.stdout


@pytest.fixture
def held_port() -> Iterator[int]:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def test_the_emulator_on_a_busy_port_names_the_port_and_the_flag(
    held_port: int, tmp_path: Path
) -> None:
    result = run_cli(["emulator", "--port", str(held_port)], {}, tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"entrabot-fleet: cannot listen on 127.0.0.1:{held_port} ")
    assert "--port" in line and "Errno" not in line
    assert "listening on" not in result.stdout


def test_python_m_emulator_on_a_busy_port_says_the_same(held_port: int, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "emulator", "--port", str(held_port)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,  # a loaded CI machine: the import alone took over 100 s at load 19 on 2 cores
    )
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"python -m emulator: cannot listen on 127.0.0.1:{held_port} ")

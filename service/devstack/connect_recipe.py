"""The lines that connect an agent to a local fleet, as ``entrabot-fleet up`` prints them.

Every command is written with absolute paths: Claude Code starts a stdio server with its own PATH, on
which a virtualenv's ``entrabot-fleet`` is not (after ``make setup``, a bare ``entrabot-fleet`` fails
with "ENOENT: Executable not found in $PATH", seen with Claude Code 2.1.332).

Codex, read in its MCP documentation and run here (TOOLCHAIN.md, ``@openai/codex`` 0.171.0): a
streamable HTTP server is a ``[mcp_servers.NAME]`` table in ``~/.codex/config.toml`` with ``url`` and
``bearer_token_env_var`` naming the variable that holds the token (the token itself stays out of the
file). Codex takes no channel events (it logs ``notifications/claude/channel`` and never shows it to
the model), so its model reads messages with the inbox tool ``receive_messages`` (docs/hosts.md). Its
tool calls time out after ``tool_timeout_sec`` (60 s by default); the inbox answers within 50 s, so the
default fits, and the line says so.
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from service.bridge.config import TOKEN_FILE_ENV

SERVER_NAME = "entrabot"
# What Codex reads the bearer token from (any name works; this one is the README's).
CODEX_TOKEN_ENV = "ENTRABOT_TOKEN"


def fleet_command() -> list[str]:
    """How to run ``entrabot-fleet`` from anywhere: the script beside this interpreter (a
    virtualenv's ``bin``, not resolved: a symlinked python would lead out of the venv), else the one on
    PATH, else this interpreter with ``-m service.cli``."""
    beside = Path(sys.executable).absolute().parent / "entrabot-fleet"
    if beside.is_file():
        return [str(beside)]
    on_path = shutil.which("entrabot-fleet")
    if on_path is not None:
        return [str(Path(on_path).absolute())]
    return [str(Path(sys.executable).absolute()), "-m", "service.cli"]


@dataclass(frozen=True)
class ConnectRecipe:
    mcp_url: str
    token_file: Path
    token: str
    fleet: tuple[str, ...]  # fleet_command()

    def channel_args(self) -> list[str]:
        return ["channel", "--fleet-url", self.mcp_url, "--push"]

    def claude_mcp_add(self) -> str:
        command = [
            "claude",
            "mcp",
            "add",
            SERVER_NAME,
            "-e",
            f"{TOKEN_FILE_ENV}={self.token_file}",
            "--",
            *self.fleet,
            *self.channel_args(),
        ]
        return shlex.join(command)

    def claude_start(self) -> str:
        return shlex.join(
            ["claude", "--dangerously-load-development-channels", f"server:{SERVER_NAME}"]
        )

    def mcp_json(self) -> str:
        server = {
            "command": self.fleet[0],
            "args": [*self.fleet[1:], *self.channel_args()],
            "env": {TOKEN_FILE_ENV: str(self.token_file)},
        }
        return json.dumps({"mcpServers": {SERVER_NAME: server}}, indent=2)

    def codex_toml(self) -> str:
        # json.dumps of a str is a valid TOML basic string.
        return "\n".join(
            [
                f"[mcp_servers.{SERVER_NAME}]",
                f"url = {json.dumps(self.mcp_url)}",
                f"bearer_token_env_var = {json.dumps(CODEX_TOKEN_ENV)}",
                "tool_timeout_sec = 60  # receive_messages answers within 50 s",
            ]
        )

    def codex_env(self) -> str:
        return f"export {CODEX_TOKEN_ENV}={shlex.quote(self.token)}"


def say_examples(fleet: tuple[str, ...], person: str, mail_person: str) -> list[str]:
    """Two ``say`` lines the developer can paste: a chat message and a mail."""
    return [
        shlex.join(
            [*fleet, "say", "--chat", "1", "--from", person, "Can you check the nightly build?"]
        ),
        shlex.join(
            [
                *fleet,
                "say",
                "--mail",
                "--from",
                mail_person,
                "--subject",
                "Travel request",
                "Could you book the Thursday train?",
            ]
        ),
    ]

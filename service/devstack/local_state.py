"""What ``entrabot-fleet up`` leaves for the developer's other commands while it runs: a small JSON
file in its state folder naming the emulator, the replicas and the agent user's chats, and the local
token in a file of its own (mode 600, as the bridge's ``ENTRABOT_BRIDGE_TOKEN_FILE`` wants it).

``say`` reads it to find the running fleet; nothing here imports more than the standard library, so
a person's command answers at once.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

STATE_FILE = "fleet.json"
TOKEN_FILE = "fleet-token"


def default_state_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """``$XDG_STATE_HOME/entrabot-fleet/local``, else ``~/.local/state/entrabot-fleet/local`` (the
    bridge keeps its own state beside it, in ``entrabot-bridge``)."""
    xdg = environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "state"
    return base / "entrabot-fleet" / "local"


@dataclass(frozen=True)
class LocalChat:
    """One chat of the agent user, as ``say --chat N`` numbers them (from 1)."""

    id: str
    topic: str | None
    member_names: list[str]  # the people in it, the agent user left out


@dataclass(frozen=True)
class LocalFleetState:
    pid: int  # the ``up`` process: a state file whose process is gone names no fleet
    emulator_url: str
    mcp_urls: list[str]
    token_file: str
    chats: list[LocalChat] = field(default_factory=list)

    def chat_label(self, index: int) -> str:
        chat = self.chats[index]
        people = ", ".join(chat.member_names)
        return f"{chat.topic}: {people}" if chat.topic else people


def write_token(state_dir: Path, token: str) -> Path:
    """The token in a file only its owner reads (created with mode 600, never widened)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / TOKEN_FILE
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token + "\n")
    return path


def write_state(state_dir: Path, state: LocalFleetState) -> Path:
    path = state_dir / STATE_FILE
    scratch = path.with_suffix(".tmp")
    scratch.write_text(json.dumps(asdict(state), indent=2) + "\n")
    scratch.replace(path)  # a reader never sees half a file
    return path


def read_state(state_dir: Path) -> LocalFleetState | None:
    """The running fleet's state, or None when no ``up`` wrote one or its process is gone."""
    try:
        raw = json.loads((state_dir / STATE_FILE).read_text())
        state = LocalFleetState(
            pid=int(raw["pid"]),
            emulator_url=str(raw["emulator_url"]),
            mcp_urls=[str(u) for u in raw["mcp_urls"]],
            token_file=str(raw["token_file"]),
            chats=[
                LocalChat(str(c["id"]), c["topic"], list(c["member_names"])) for c in raw["chats"]
            ],
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return state if process_alive(state.pid) else None


def remove_state(state_dir: Path, pid: int) -> None:
    """Remove the state file if it is still this process's (a later ``up`` may have replaced it)."""
    current = read_state(state_dir)
    if current is None or current.pid == pid:
        (state_dir / STATE_FILE).unlink(missing_ok=True)


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True

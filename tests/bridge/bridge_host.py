"""A host for the bridge: the official MCP Python SDK's stdio client spawning ``entrabot-fleet channel``."""

from __future__ import annotations

import os
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp.client import Client
from mcp.client.extension import ClientExtension, NotificationBinding
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp_types import Implementation
from pydantic import BaseModel, ConfigDict

from service.bridge.config import HOST_ID_ENV
from service.bridge.written_log import STATE_DIR_ENV

REPO_ROOT = Path(__file__).resolve().parents[2]
CHANNEL_METHOD = "notifications/claude/channel"
VERDICT_METHOD = "notifications/claude/channel/permission"


class _Params(BaseModel):
    model_config = ConfigDict(extra="allow")


@dataclass
class Received:
    """What the bridge emitted on its stdout, by method, in arrival order (params as sent)."""

    channel: list[dict[str, Any]] = field(default_factory=list)
    verdicts: list[dict[str, Any]] = field(default_factory=list)

    def message_ids(self) -> list[str]:
        return [str(p["meta"]["message_id"]) for p in self.channel]


class _Listener(ClientExtension):
    identifier = "dev.entrabot/bridge-test-host"

    def __init__(self, received: Received) -> None:
        self._received = received

    def notifications(self) -> list[NotificationBinding[Any]]:
        return [
            NotificationBinding(method=CHANNEL_METHOD, params_type=_Params, handler=self._channel),
            NotificationBinding(method=VERDICT_METHOD, params_type=_Params, handler=self._verdict),
        ]

    async def _channel(self, params: _Params) -> None:
        self._received.channel.append(params.model_dump(mode="json"))

    async def _verdict(self, params: _Params) -> None:
        self._received.verdicts.append(params.model_dump(mode="json"))


def bridge_parameters(
    fleet_url: str,
    *,
    token: str,
    args: Sequence[str] = ("--push",),
    env: dict[str, str] | None = None,
) -> StdioServerParameters:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ENTRABOT_")}
    environ.update(
        {
            "PYTHONPATH": str(REPO_ROOT),
            "ENTRABOT_BRIDGE_TOKEN": token,
            "PYTHONUNBUFFERED": "1",
            # A state folder of its own: what one test's bridge wrote must not drop another's pushes,
            # nor land in the user's ~/.local/state.
            STATE_DIR_ENV: tempfile.mkdtemp(prefix="bridge-state-"),
            # A host of its own, as two Claude Code sessions in two projects are (one project
            # folder and one fleet URL would otherwise give every test bridge one identity).
            HOST_ID_ENV: f"test-host-{uuid.uuid4().hex[:12]}",
        }
    )
    environ.update(env or {})
    return StdioServerParameters(
        command=sys.executable,
        # The tests read the bridge's INFO lines (sessions opened, streams resumed); users get WARNING.
        args=[
            "-m",
            "service.cli",
            "channel",
            "--fleet-url",
            fleet_url,
            *(() if "--log-level" in args else ("--log-level", "INFO")),
            *args,
        ],
        env=environ,
        cwd=str(REPO_ROOT),
    )


@asynccontextmanager
async def bridge_host(
    fleet_url: str,
    stderr_path: Path,
    *,
    token: str = "bridge-test-token",
    args: Sequence[str] = ("--push",),
    mode: str = "legacy",
    env: dict[str, str] | None = None,
    message_handler: Any = None,
) -> AsyncIterator[tuple[Client, Received]]:
    """A connected host; the bridge's stderr lands in ``stderr_path``."""
    received = Received()
    with open(stderr_path, "a", encoding="utf-8") as errlog:
        client = Client(
            stdio_client(
                bridge_parameters(fleet_url, token=token, args=args, env=env), errlog=errlog
            ),
            mode=mode,
            extensions=[_Listener(received)],
            client_info=Implementation(name="claude-code", version="test"),
            read_timeout_seconds=60,
            cache=None,
            message_handler=message_handler,
        )
        async with client:
            yield client, received

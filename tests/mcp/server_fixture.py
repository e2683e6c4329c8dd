"""A small FastAPI app built from the MCP pieces, with demo tools, served by a real uvicorn.

Reusable by other test folders: ``async with live_mcp(settings) as live: ...`` gives the base URL and
the app's own objects (hub, MCP service, metrics), reachable from the test's event loop.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
from eventually import (
    WAIT_BOUND_S as WAIT_BOUND_S,
)  # the waits these tests and their importers share
from eventually import eventually as eventually
from fastapi import FastAPI
from mcp.client.extension import ClientExtension, NotificationBinding
from mcp.shared.inbound import MCP_METHOD_HEADER, MCP_NAME_HEADER, MCP_PROTOCOL_VERSION_HEADER
from mcp_types import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, PROTOCOL_VERSION_META_KEY
from mcp_types.version import LATEST_MODERN_VERSION
from pydantic import BaseModel, ConfigDict
from starlette.routing import Route
from starlette.types import ASGIApp

from service.config import Settings
from service.delivery.host_keeper import HostKeeper
from service.delivery.hub import DeliveryHub, DeliveryTarget, Handover, TargetKind
from service.devstack.uvicorn_runner import serve_app
from service.domain.message import InboundMessage, Source
from service.from_settings.mcp import mcp_options
from service.mcp.bearer import MCP_PATH
from service.mcp.caller_line import RESUME_GRACE_S
from service.mcp.hosts import BRIDGE_PUSH_CLIENT_NAME
from service.mcp.instructions import HostInstructions
from service.mcp.push_target import DEFAULT_SEND_TIMEOUT_S, PushDelivery
from service.mcp.server import McpService
from service.mcp.tool_registry import ToolCall, ToolRegistry
from service.telemetry.metrics import Metrics

PUSH_METHOD = "notifications/claude/channel"


def mcp_settings(**overrides: Any) -> Settings:
    """Settings for a loopback test server, isolated from the environment and any .env file."""
    values: dict[str, Any] = {"host": "127.0.0.1", "mcp_allowed_hosts": "127.0.0.1,localhost"}
    values.update(overrides)
    return Settings(_env_file=None, **values)


# --- demo tools ---


class EchoInput(BaseModel):
    text: str


class EchoOutput(BaseModel):
    text: str
    session_id: str | None
    push_capable: bool


class SponsorWaitInput(BaseModel):
    chat_id: str


class SponsorWaitOutput(BaseModel):
    message_id: str
    chat_id: str


@dataclass(eq=False)
class DemoSponsorWait:
    """A sponsor wait as the lead's tools will hold one: takes one chat message from one chat."""

    target_id: str
    chat_id: str
    received: asyncio.Future[InboundMessage] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    @property
    def kind(self) -> TargetKind:
        return TargetKind.SPONSOR_WAIT

    def is_alive(self) -> bool:
        return not self.received.done()

    def accepts(self, message: InboundMessage) -> bool:
        return message.source is Source.CHAT and message.chat_id == self.chat_id

    def room_for(self, message: InboundMessage, alongside: Sequence[InboundMessage]) -> bool:
        return not alongside and not self.received.done()

    def allotted(self, taken: Sequence[InboundMessage], left: Sequence[InboundMessage]) -> None:
        """The demo wait takes whatever comes first."""

    async def deliver(self, message: InboundMessage) -> Handover:
        if self.received.done():
            return Handover.NOT_TAKEN
        self.received.set_result(message)
        return Handover.TAKEN


def demo_tools() -> ToolRegistry:
    tools = ToolRegistry()

    @tools.tool()
    async def echo(args: EchoInput, call: ToolCall) -> EchoOutput:
        """Echo the text, with what the server knows about the calling session."""
        return EchoOutput(
            text=args.text, session_id=call.session_id, push_capable=call.push_capable
        )

    @tools.tool()
    async def wait_for_sponsor(args: SponsorWaitInput, call: ToolCall) -> SponsorWaitOutput:
        """Wait for the next chat message in one chat."""
        wait = DemoSponsorWait(
            target_id=f"wait:{call.session_id}:{call.request_id}", chat_id=args.chat_id
        )
        async with call.holding(wait):
            message = await wait.received
        return SponsorWaitOutput(message_id=message.message_id, chat_id=message.chat_id)

    return tools


# --- the app ---


@dataclass
class LiveMcp:
    base_url: str
    mcp: McpService
    hub: DeliveryHub
    metrics: Metrics

    @property
    def url(self) -> str:
        return f"{self.base_url}/mcp"

    def push_targets(self) -> list[DeliveryTarget]:
        return [t for t in self.hub.live_targets() if t.kind is TargetKind.PUSH]


def build_app(
    settings: Settings,
    *,
    wrap_mcp: Callable[[ASGIApp], ASGIApp] | None = None,
    hub: DeliveryHub | None = None,
    tools: ToolRegistry | None = None,
    keeper: HostKeeper | None = None,
    push_send_timeout_s: float = DEFAULT_SEND_TIMEOUT_S,
    caller_grace_s: float = RESUME_GRACE_S,
    instructions: HostInstructions | None = None,
) -> tuple[FastAPI, McpService, DeliveryHub, Metrics]:
    """The app; ``wrap_mcp`` puts an ASGI layer of the test's around the whole /mcp endpoint. ``hub`` and
    ``tools``: a replica's own, else a fresh hub and the demo tools."""
    metrics = Metrics()
    hub = hub if hub is not None else DeliveryHub(metrics=metrics.delivery)
    mcp = McpService(
        mcp_options(settings),
        PushDelivery(hub, metrics.delivery, keeper=keeper, send_timeout_s=push_send_timeout_s),
        metrics=metrics.mcp,
        tools=tools if tools is not None else demo_tools(),
        caller_grace_s=caller_grace_s,
        instructions=instructions,
    )
    routes = mcp.routes()
    if wrap_mcp is not None:
        routes = [
            Route(MCP_PATH, wrap_mcp(mcp.endpoint)),
            *(r for r in routes if getattr(r, "path", None) != MCP_PATH),
        ]

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with mcp.lifespan():
            yield

    return FastAPI(routes=routes, lifespan=lifespan), mcp, hub, metrics


@asynccontextmanager
async def live_mcp(
    settings: Settings | None = None,
    *,
    wrap_mcp: Callable[[ASGIApp], ASGIApp] | None = None,
    hub: DeliveryHub | None = None,
    **mcp_options: Any,
) -> AsyncIterator[LiveMcp]:
    app, mcp, hub, metrics = build_app(
        settings or mcp_settings(), wrap_mcp=wrap_mcp, hub=hub, **mcp_options
    )
    async with serve_app(app) as server:
        yield LiveMcp(server.base_url, mcp, hub, metrics)


# --- helpers shared by the tests ---


def chat_message(
    message_id: str, *, chat_id: str = "19:demo@thread.v2", body: str = "hello"
) -> InboundMessage:
    return InboundMessage(
        source=Source.CHAT,
        chat_id=chat_id,
        message_id=message_id,
        sender_id="00000000-0000-0000-0000-00000000a11c",
        sender_name="Alice",
        created=datetime.now(UTC),
        body=body,
    )


MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def initialize_body(client_name: str, request_id: int = 1) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": client_name, "version": "raw-test"},
        },
    }


@dataclass(frozen=True)
class SseEvent:
    id: str | None
    data: dict[str, Any]


async def sse_events(response: httpx.Response) -> AsyncIterator[SseEvent]:
    """The SSE events of a streaming response (comments and empty priming data skipped)."""
    event_id: str | None = None
    data: list[str] = []
    async for line in response.aiter_lines():
        if line == "":
            if data and "".join(data).strip():
                yield SseEvent(event_id, json.loads("\n".join(data)))
            event_id, data = None, []
        elif line.startswith("id:"):
            event_id = line[3:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())


async def open_raw_session(
    http: httpx.AsyncClient, url: str, client_name: str = BRIDGE_PUSH_CLIENT_NAME
) -> str:
    """Initialize a session by hand (no GET stream) and return its id."""
    response = await http.post(url, json=initialize_body(client_name), headers=MCP_HEADERS)
    assert response.status_code == 200, response.text
    session_id = response.headers["mcp-session-id"]
    headers = {**MCP_HEADERS, "Mcp-Session-Id": session_id, "MCP-Protocol-Version": "2025-11-25"}
    initialized = await http.post(
        url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers
    )
    assert initialized.status_code == 202, initialized.text
    return session_id


def session_headers(session_id: str) -> dict[str, str]:
    return {**MCP_HEADERS, "Mcp-Session-Id": session_id, "MCP-Protocol-Version": "2025-11-25"}


def modern_request(
    method: str,
    params: dict[str, Any] | None = None,
    *,
    request_id: int = 1,
    client_name: str = "raw",
) -> tuple[dict[str, Any], dict[str, str]]:
    """A 2026-07-28 request by hand: the body with its ``_meta`` envelope, and the headers that must
    repeat it (the SDK refuses a request whose headers and body disagree)."""
    envelope = {
        PROTOCOL_VERSION_META_KEY: LATEST_MODERN_VERSION,
        CLIENT_CAPABILITIES_META_KEY: {},
        CLIENT_INFO_META_KEY: {"name": client_name, "version": "raw-test"},
    }
    params = {**(params or {}), "_meta": envelope}
    headers = {
        **MCP_HEADERS,
        MCP_PROTOCOL_VERSION_HEADER: LATEST_MODERN_VERSION,
        MCP_METHOD_HEADER: method,
    }
    if "name" in params:
        headers[MCP_NAME_HEADER] = params["name"]
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    return body, headers


class ChannelParams(BaseModel):
    model_config = ConfigDict(extra="allow")
    content: str
    meta: dict[str, Any]


class ChannelListener(ClientExtension):
    """Receives ``notifications/claude/channel``: the client shows unknown methods only to extensions."""

    identifier = "com.example/channel-listener"

    def __init__(self) -> None:
        self.pushes: list[ChannelParams] = []

    def notifications(self) -> list[NotificationBinding[Any]]:
        return [
            NotificationBinding(
                method="notifications/claude/channel", params_type=ChannelParams, handler=self._on
            )
        ]

    async def _on(self, params: ChannelParams) -> None:
        self.pushes.append(params)

    def message_ids(self) -> list[str]:
        return [p.meta["message_id"] for p in self.pushes]

"""An in-process replica MCP server with the demo tools, optionally relaying permission requests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from fastapi import FastAPI
from pydantic import BaseModel
from starlette.types import ASGIApp, Receive, Scope, Send

from service.delivery.hub import DeliveryHub
from service.devstack.uvicorn_runner import serve_app
from service.from_settings.mcp import build_mcp
from service.mcp.sdk_adapter import PERMISSION_REQUEST_METHOD
from service.mcp.tool_registry import ToolCall
from service.telemetry.metrics import Metrics
from tests.mcp.server_fixture import LiveMcp, demo_tools, mcp_settings


class PermissionInput(BaseModel):
    request_id: str
    tool_name: str
    description: str
    input_preview: str


@dataclass
class PermissionDesk:
    """The permission requests the fleet received (as host notifications), in order, and every request's headers."""

    requests: list[PermissionInput] = field(default_factory=list)
    http_requests: list[tuple[str, dict[str, str]]] = field(
        default_factory=list
    )  # (method, headers)


class _RecordHeaders:
    """ASGI wrapper noting each HTTP request's method and headers before the app sees it."""

    def __init__(self, app: ASGIApp, seen: list[tuple[str, dict[str, str]]]) -> None:
        self.app = app
        self.seen = seen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.seen.append(
                (scope["method"], {k.decode(): v.decode() for k, v in scope["headers"]})
            )
        await self.app(scope, receive, send)


@asynccontextmanager
async def fleet_server(
    *, with_permission_relay: bool
) -> AsyncIterator[tuple[LiveMcp, PermissionDesk]]:
    desk = PermissionDesk()
    tools = demo_tools()
    if with_permission_relay:

        async def ask_sponsors(args: PermissionInput, call: ToolCall) -> None:
            desk.requests.append(args)

        tools.add_host_notification(PERMISSION_REQUEST_METHOD, ask_sponsors)

    metrics = Metrics()
    hub = DeliveryHub(metrics=metrics.delivery)
    mcp = build_mcp(mcp_settings(), hub, metrics=metrics, tools=tools)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with mcp.lifespan():
            yield

    app = _RecordHeaders(FastAPI(routes=mcp.routes(), lifespan=lifespan), desk.http_requests)
    async with serve_app(app) as server:
        yield LiveMcp(server.base_url, mcp, hub, metrics), desk

"""An in-process replica MCP server with the demo tools, optionally plus ``request_permission``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from fastapi import FastAPI
from pydantic import BaseModel

from service.delivery.hub import DeliveryHub
from service.devstack.uvicorn_runner import serve_app
from service.mcp.server import build_mcp
from service.mcp.tools import ToolCall
from service.telemetry.metrics import Metrics
from tests.mcp.server_fixture import LiveMcp, demo_tools, mcp_settings


class PermissionInput(BaseModel):
    request_id: str
    tool_name: str
    description: str
    input_preview: str


class PermissionAck(BaseModel):
    asked: bool


@dataclass
class PermissionDesk:
    """What the fleet's ``request_permission`` tool was asked, in order."""

    requests: list[PermissionInput] = field(default_factory=list)


@asynccontextmanager
async def fleet_server(*, with_permission_tool: bool) -> AsyncIterator[tuple[LiveMcp, PermissionDesk]]:
    desk = PermissionDesk()
    tools = demo_tools()
    if with_permission_tool:

        @tools.tool(name="request_permission")
        async def request_permission(args: PermissionInput, call: ToolCall) -> PermissionAck:
            """Ask the agent's sponsor to allow a tool use."""
            desk.requests.append(args)
            return PermissionAck(asked=True)

    metrics = Metrics()
    hub = DeliveryHub(metrics=metrics)
    mcp = build_mcp(mcp_settings(), hub, metrics=metrics, tools=tools)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with mcp.lifespan():
            yield

    async with serve_app(FastAPI(routes=mcp.routes(), lifespan=lifespan)) as server:
        yield LiveMcp(server.base_url, mcp, hub, metrics), desk

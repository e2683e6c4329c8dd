"""MCP session ids never reach a log line: a session id plus the shared token takes over a host's stream.

Real sessions of the official Python client against a live server, a real sponsor wait
(``SponsorWaiter``), logs captured through the service's own JSON logging at DEBUG.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI
from mcp.client import Client
from mcp_types import Implementation
from pydantic import BaseModel

from service.delivery.hub import DeliveryHub, DispatchOutcome, TargetKind
from service.devstack.uvicorn_runner import serve_app
from service.domain.sponsors import Sponsor, SponsorGate
from service.from_settings.mcp import build_mcp
from service.mcp.hosts import BRIDGE_PUSH_CLIENT_NAME
from service.mcp.tool_registry import ToolCall, ToolRegistry
from service.telemetry.logging import configure_logging, session_ref
from service.telemetry.metrics import DeliveryMetrics, Metrics
from service.tools.sponsor_wait import SponsorWaiter
from tests.mcp.server_fixture import (
    MCP_HEADERS,
    WAIT_BOUND_S,
    chat_message,
    eventually,
    mcp_settings,
)

SPONSOR_ID = "00000000-0000-0000-0000-00000000a11c"


class Nothing(BaseModel):
    pass


class WhoAmI(BaseModel):
    session_id: str | None


class WaitOutput(BaseModel):
    outcome: str


def logging_tools(waiter: SponsorWaiter) -> ToolRegistry:
    tools = ToolRegistry()

    @tools.tool()
    async def whoami(args: Nothing, call: ToolCall) -> WhoAmI:
        """The calling session's id."""
        return WhoAmI(session_id=call.session_id)

    @tools.tool()
    async def wait_for_sponsor_dm(args: Nothing, call: ToolCall) -> WaitOutput:
        """The service's sponsor wait."""
        return WaitOutput(outcome=(await waiter.wait(call, WAIT_BOUND_S)).outcome.value)

    return tools


@asynccontextmanager
async def live_server(hub: DeliveryHub) -> AsyncIterator[str]:
    waiter = SponsorWaiter(
        SponsorGate([Sponsor(object_id=SPONSOR_ID)], tenant_id=None), max_timeout_s=WAIT_BOUND_S
    )
    mcp = build_mcp(mcp_settings(), hub, metrics=Metrics(), tools=logging_tools(waiter))

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with mcp.lifespan():
            yield

    async with serve_app(
        FastAPI(routes=mcp.routes(), lifespan=lifespan), log_level="info"
    ) as server:
        yield f"{server.base_url}/mcp"


def client(url: str, name: str) -> Client:
    return Client(
        url,
        client_info=Implementation(name=name, version="1.0"),
        mode="legacy",
        read_timeout_seconds=WAIT_BOUND_S,
    )


async def session_id_of(host: Client) -> str:
    result = await host.call_tool("whoami", {})
    session_id = result.structured_content["session_id"]
    assert session_id
    return session_id


async def test_no_log_line_carries_an_mcp_session_id_through_a_push_session_and_a_sponsor_wait() -> (
    None
):
    stream = io.StringIO()
    configure_logging("DEBUG", replica_id="r-sessions", stream=stream)
    hub = DeliveryHub(DeliveryMetrics())
    stranger = uuid.uuid4().hex  # what another replica's live session id looks like
    try:
        async with live_server(hub) as url:
            async with client(url, BRIDGE_PUSH_CLIENT_NAME) as push_host:
                push_id = await session_id_of(push_host)
                await eventually(
                    lambda: [t for t in hub.live_targets() if t.kind is TargetKind.PUSH],
                    "the push host's stream",
                )
                [pushed] = await hub.dispatch([chat_message("m-push")])
                assert pushed.outcome is DispatchOutcome.DELIVERED
                async with client(url, "codex") as waiting_host:
                    wait_id = await session_id_of(waiting_host)
                    waiting = asyncio.create_task(waiting_host.call_tool("wait_for_sponsor_dm", {}))
                    await eventually(
                        lambda: [
                            t for t in hub.live_targets() if t.kind is TargetKind.SPONSOR_WAIT
                        ],
                        "the sponsor wait",
                    )
                    await hub.dispatch(
                        [dataclasses.replace(chat_message("m-sponsor"), sender_is_sponsor=True)]
                    )
                    answered = await asyncio.wait_for(waiting, WAIT_BOUND_S)
                    assert answered.structured_content == {"outcome": "reply"}
            async with httpx.AsyncClient(timeout=WAIT_BOUND_S) as http:
                refused = await http.post(
                    url,
                    headers={**MCP_HEADERS, "mcp-session-id": stranger},
                    json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                )
                assert refused.status_code == 404
    finally:
        logging.getLogger().handlers.clear()
    text = stream.getvalue()
    for session_id in (push_id, wait_id, stranger):
        assert session_id not in text
    # The session lines are there, under a reference that still correlates them.
    assert session_ref(wait_id) in text and "sponsor wait answered" in text
    assert session_ref(push_id) in text and session_ref(stranger) in text

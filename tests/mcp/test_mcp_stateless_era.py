"""Hosts on MCP 2026-07-28 over real HTTP: served per request, with no session, by any replica.

The official Python client in its default mode settles on 2026-07-28 against /mcp. Its requests carry
no ``Mcp-Session-Id``, so a load balancer without affinity may send each to another replica; here one
client's requests are moved from one replica to the other between calls. A legacy-mode client on the
same server still opens a session and gets pushes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass

import httpx
import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.shared.inbound import MCP_METHOD_HEADER
from mcp_types import Implementation
from starlette.types import ASGIApp, Receive, Scope, Send

from service.delivery.hub import DispatchOutcome, TargetKind
from service.mcp.hosts import BRIDGE_PUSH_CLIENT_NAME
from service.mcp.instructions import FLEET_INSTRUCTIONS, HOST_INSTRUCTIONS, INBOX_INSTRUCTIONS
from service.mcp.sdk_adapter import CHANNEL_CAPABILITY
from tests.mcp.server_fixture import (
    WAIT_BOUND_S,
    ChannelListener,
    LiveMcp,
    chat_message,
    eventually,
    live_mcp,
    modern_request,
)


class Seen:
    """An ASGI layer around one replica's /mcp recording each request's (Mcp-Method, Mcp-Session-Id)."""

    def __init__(self) -> None:
        self.app: ASGIApp | None = None
        self.requests: list[tuple[str | None, str | None]] = []

    def wrap(self, app: ASGIApp) -> ASGIApp:
        self.app = app
        return self  # an instance: Starlette serves a plain function as a GET endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            self.requests.append(
                (headers.get(MCP_METHOD_HEADER), headers.get(MCP_SESSION_ID_HEADER.lower()))
            )
        assert self.app is not None
        await self.app(scope, receive, send)

    def methods(self) -> list[str | None]:
        return [method for method, _ in self.requests]


@dataclass
class Replica:
    live: LiveMcp
    seen: Seen


@pytest.fixture
async def replicas() -> AsyncIterator[list[Replica]]:
    """Two replicas of the MCP server, each on its own free loopback port, with the fleet's texts."""
    async with AsyncExitStack() as stack:
        started = []
        for _ in range(2):
            seen = Seen()
            live = await stack.enter_async_context(
                live_mcp(wrap_mcp=seen.wrap, instructions=HOST_INSTRUCTIONS)
            )
            started.append(Replica(live, seen))
        yield started


class Balancer(httpx2.AsyncBaseTransport):
    """A load balancer with no session affinity: every request goes to replica ``to``."""

    def __init__(self, replicas: list[Replica]) -> None:
        self._targets = [httpx2.URL(r.live.base_url) for r in replicas]
        self._inner = httpx2.AsyncHTTPTransport()
        self.to = 0

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        target = self._targets[self.to]
        request.url = request.url.copy_with(host=target.host, port=target.port)
        request.headers["Host"] = f"{target.host}:{target.port}"
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def default_client(balancer: Balancer, name: str) -> Client:
    http = httpx2.AsyncClient(transport=balancer, timeout=WAIT_BOUND_S)
    return Client(
        streamable_http_client("http://fleet.invalid/mcp", http_client=http),
        client_info=Implementation(name=name, version="1"),
        read_timeout_seconds=WAIT_BOUND_S,
    )


async def test_the_default_client_lists_and_calls_tools_on_either_replica_with_no_session(
    replicas: list[Replica],
) -> None:
    first, second = replicas
    balancer = Balancer(replicas)
    async with default_client(balancer, "codex-mcp-client") as client:
        assert client.protocol_version == "2026-07-28"
        tools = await client.list_tools()
        assert {t.name for t in tools.tools} == {"echo", "wait_for_sponsor"}
        here = await client.call_tool("echo", {"text": "on the first"})

        balancer.to = 1  # the next request lands on the other replica, which never saw this host
        there = await client.call_tool("echo", {"text": "on the second"})
        listed = await client.list_tools(cache_mode="bypass")

    assert not here.is_error and not there.is_error
    assert here.structured_content == {
        "text": "on the first",
        "session_id": None,
        "push_capable": False,
    }
    assert there.structured_content is not None
    assert there.structured_content["text"] == "on the second"
    assert {t.name for t in listed.tools} == {"echo", "wait_for_sponsor"}
    assert "tools/call" in first.seen.methods() and "tools/call" in second.seen.methods()
    assert "tools/list" in second.seen.methods()
    for replica in replicas:
        assert all(session is None for _, session in replica.seen.requests)
        assert replica.live.mcp.sessions.sessions() == []


async def test_no_host_is_told_of_the_channel_on_2026_07_28_not_even_a_push_host(
    replicas: list[Replica],
) -> None:
    async with default_client(Balancer(replicas), BRIDGE_PUSH_CLIENT_NAME) as client:
        assert client.protocol_version == "2026-07-28"
        assert CHANNEL_CAPABILITY not in (client.server_capabilities.experimental or {})
        assert client.instructions == INBOX_INSTRUCTIONS
        result = await client.call_tool("echo", {"text": "no pushes here"})
        assert result.structured_content is not None
        assert result.structured_content["push_capable"] is False
    assert replicas[0].live.push_targets() == []


async def test_a_2026_07_28_request_opens_no_session(replicas: list[Replica]) -> None:
    live = replicas[0].live
    body, headers = modern_request("tools/call", {"name": "echo", "arguments": {"text": "raw"}})
    async with httpx.AsyncClient(timeout=WAIT_BOUND_S) as http:
        response = await http.post(live.url, json=body, headers=headers)
    assert response.status_code == 200, response.text
    assert MCP_SESSION_ID_HEADER.lower() not in response.headers
    assert response.json()["result"]["structuredContent"]["session_id"] is None
    assert live.mcp.sessions.sessions() == []


async def test_a_legacy_client_on_the_same_replica_keeps_its_session_and_pushes(
    replicas: list[Replica],
) -> None:
    live = replicas[0].live
    listener = ChannelListener()
    async with (
        default_client(Balancer(replicas), "codex-mcp-client") as stateless,
        Client(
            live.url,
            mode="legacy",
            extensions=[listener],
            client_info=Implementation(name=BRIDGE_PUSH_CLIENT_NAME, version="1"),
            read_timeout_seconds=WAIT_BOUND_S,
        ) as client,
    ):
        assert stateless.protocol_version == "2026-07-28"
        assert client.protocol_version == "2025-11-25"
        assert CHANNEL_CAPABILITY in (client.server_capabilities.experimental or {})
        assert client.instructions == FLEET_INSTRUCTIONS
        echoed = await client.call_tool("echo", {"text": "with a session"})
        assert echoed.structured_content is not None
        [state] = live.mcp.sessions.sessions()
        assert echoed.structured_content["session_id"] == state.session_id
        await eventually(live.push_targets, "the legacy client's push stream")
        # The stateless host's calls go on beside the session, and take nothing from it.
        assert not (await stateless.call_tool("echo", {"text": "beside it"})).is_error
        [dispatched] = await live.hub.dispatch([chat_message("m-1")])
        assert dispatched.outcome is DispatchOutcome.DELIVERED
        await eventually(lambda: listener.message_ids() == ["m-1"], "the push at the legacy client")
        assert [s.session_id for s in live.mcp.sessions.sessions()] == [state.session_id]


async def test_a_stateless_wait_ends_when_its_host_hangs_up(replicas: list[Replica]) -> None:
    # With no session there is no caller line (caller_line): the SDK's per-request path cancels the
    # handler when the connection closes, and the wait leaves the hub with it.
    live = replicas[0].live
    body, headers = modern_request(
        "tools/call", {"name": "wait_for_sponsor", "arguments": {"chat_id": "19:sponsor@thread.v2"}}
    )

    def waiting() -> bool:
        return any(t.kind is TargetKind.SPONSOR_WAIT for t in live.hub.live_targets())

    async with httpx.AsyncClient(timeout=WAIT_BOUND_S) as http:
        call = asyncio.create_task(http.post(live.url, json=body, headers=headers))
        await eventually(waiting, "the stateless wait in the hub")
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
    await eventually(lambda: not waiting(), "the wait to leave the hub once its host hung up")
    assert live.mcp.sessions.sessions() == []

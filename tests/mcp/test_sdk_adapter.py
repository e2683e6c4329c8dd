"""Pins every assumption service/mcp/sdk_adapter.py makes about the mcp SDK.

Each check fails with "the mcp SDK changed: ..." so an upgrade that breaks one says where to look.
"""

from __future__ import annotations

import inspect
from functools import partial
from importlib.metadata import version
from typing import Any

import httpx
import mcp.server.runner as runner
from mcp.client import Client
from mcp.server.connection import Connection
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.session import ServerSession
from mcp.server.streamable_http import (
    GET_STREAM_KEY,
    LAST_EVENT_ID_HEADER,
    EventMessage,
    StreamableHTTPServerTransport,
)
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp_types import Implementation, JSONRPCNotification
from mcp_types.version import (
    HANDSHAKE_PROTOCOL_VERSIONS,
    LATEST_HANDSHAKE_VERSION,
    LATEST_MODERN_VERSION,
    MODERN_PROTOCOL_VERSIONS,
)

from service.delivery.hub import DispatchOutcome
from service.mcp.event_store import InMemoryEventStore, SessionEventStore
from service.mcp.sdk_adapter import (
    CHANNEL_CAPABILITY,
    ChannelServer,
    PerSessionEventStoreManager,
    call_when_session_ends,
    session_id_of,
)
from tests.mcp.server_fixture import (
    LiveMcp,
    chat_message,
    eventually,
    open_raw_session,
    session_headers,
)


def bare_connection(outbound: Any = None, session_id: str | None = None) -> Connection:
    return Connection(outbound, protocol_version=LATEST_HANDSHAKE_VERSION, session_id=session_id)


def sdk_changed(what: str) -> str:
    return f"the mcp SDK changed: {what}; update service/mcp/sdk_adapter.py (and re-pin mcp in pyproject.toml)"


def test_the_pinned_sdk_line_is_installed() -> None:
    installed = version("mcp")
    assert installed.startswith("2.3."), sdk_changed(
        f"mcp {installed} is installed, the adapter is for 2.3.x"
    )


async def test_the_channel_capability_reaches_the_initialize_result() -> None:
    server = ChannelServer("adapter-check")
    options = server.create_initialization_options()
    assert options.capabilities.experimental == {CHANNEL_CAPABILITY: {}}, sdk_changed(
        "create_initialization_options() no longer builds capabilities through get_capabilities()"
    )
    async with Client(server, mode="legacy") as client:
        experimental = client.server_capabilities.experimental or {}
    assert CHANNEL_CAPABILITY in experimental, sdk_changed(
        "the initialize handshake no longer answers with server.create_initialization_options()"
    )


def test_a_session_object_still_leads_to_its_connection() -> None:
    connection = bare_connection(session_id="session-1")
    session = ServerSession(object(), connection)  # type: ignore[arg-type]
    assert session_id_of(session) == "session-1", sdk_changed(
        "ServerSession no longer keeps `_connection`"
    )


async def test_a_connection_end_runs_the_callbacks_pushed_on_its_exit_stack() -> None:
    connection = bare_connection(session_id="session-1")
    ended: list[str] = []

    async def on_end() -> None:
        ended.append("ended")

    call_when_session_ends(ServerSession(object(), connection), on_end)  # type: ignore[arg-type]
    await connection.exit_stack.aclose()
    assert ended == ["ended"], sdk_changed("Connection.exit_stack is no longer an AsyncExitStack")
    for driver in ("serve_connection", "serve_one"):
        source = inspect.getsource(getattr(runner, driver))
        assert "aclose_shielded(connection)" in source, sdk_changed(
            f"{driver} no longer unwinds connection.exit_stack"
        )


async def test_server_middleware_sees_initialize_with_its_session_and_raw_params() -> None:
    server = ChannelServer("adapter-check")
    seen: list[tuple[str, Any, Any]] = []

    async def observe(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        result = await call_next(ctx)
        seen.append((ctx.method, ctx.session, ctx.params))
        assert isinstance(result, dict) and result.get("protocolVersion"), sdk_changed(
            "a middleware no longer gets the initialize result as a wire dict"
        )
        return result

    server.middleware.append(observe)
    async with Client(
        server, mode="legacy", client_info=Implementation(name="claude-code", version="9")
    ):
        pass
    initialize = [entry for entry in seen if entry[0] == "initialize"]
    assert initialize, sdk_changed("Server.middleware no longer wraps initialize")
    _, session, params = initialize[0]
    assert isinstance(session, ServerSession), sdk_changed(
        "ctx.session is no longer a ServerSession"
    )
    assert params["clientInfo"]["name"] == "claude-code", sdk_changed(
        "ctx.params are no longer the raw params"
    )


def test_each_admitted_session_gets_its_own_event_history() -> None:
    stores = InMemoryEventStore()
    manager = PerSessionEventStoreManager(ChannelServer("adapter-check"), event_stores=stores)
    first, second = manager._admit_session(None), manager._admit_session(None)
    assert isinstance(first, StreamableHTTPServerTransport) and isinstance(
        second, StreamableHTTPServerTransport
    ), sdk_changed("_admit_session no longer returns the new session's transport")
    assert first.mcp_session_id is not None and second.mcp_session_id is not None
    assert first._event_store is stores.for_session(first.mcp_session_id)
    assert second._event_store is stores.for_session(second.mcp_session_id)
    assert first._event_store is not second._event_store
    source = inspect.getsource(StreamableHTTPSessionManager._handle_stateful_request)
    assert "self._admit_session(" in source, sdk_changed(
        "new sessions are no longer created by _admit_session"
    )
    transport_source = inspect.getsource(StreamableHTTPServerTransport)
    assert "self._event_store" in transport_source, sdk_changed(
        "the transport no longer reads `_event_store`"
    )
    # The SDK asks `if self._event_store:`; an empty history must still count as a store.
    assert bool(SessionEventStore()), sdk_changed("an empty event store must stay truthy")


def test_push_streams_are_keyed_and_replayed_as_the_event_store_expects() -> None:
    assert GET_STREAM_KEY == "_GET_stream", sdk_changed("the standalone GET stream key changed")
    params = list(inspect.signature(EventMessage).parameters)
    assert params[:2] == ["message", "event_id"], sdk_changed(
        "EventMessage is no longer (message, event_id)"
    )


def test_the_router_stores_every_message_and_forwards_only_to_an_attached_stream() -> None:
    # event_store.py's docstring: a message for a stream not attached is stored and nothing else, so
    # the history is the whole of the push stream.
    source = inspect.getsource(StreamableHTTPServerTransport.connect)
    stored = source.find("await self._event_store.store_event(request_stream_id, message)")
    forwarded = source.find("if request_stream_id in self._request_streams:")
    assert 0 <= stored < forwarded, sdk_changed(
        "message_router no longer stores each message before routing it"
    )


def test_a_get_with_last_event_id_is_served_by_the_event_store_alone_while_it_runs() -> None:
    get = inspect.getsource(StreamableHTTPServerTransport._handle_get_request)
    assert "request.headers.get(LAST_EVENT_ID_HEADER)" in get and "self._replay_events(" in get, (
        sdk_changed("a GET with Last-Event-ID is no longer answered by _replay_events")
    )
    replay = inspect.getsource(StreamableHTTPServerTransport._replay_events)
    asked = replay.find("await event_store.replay_events_after(last_event_id, send_event)")
    attached = replay.find("if stream_id and stream_id not in self._request_streams")
    assert 0 <= asked < attached, sdk_changed(
        "_replay_events no longer attaches a live stream only after replay_events_after returns a stream id"
    )


async def test_the_sdk_never_attaches_a_push_stream_of_its_own(
    live: LiveMcp, http: httpx.AsyncClient
) -> None:
    session_id = await open_raw_session(http, live.url)
    async with http.stream(
        "GET", live.url, headers={**session_headers(session_id), "Accept": "text/event-stream"}
    ):
        await eventually(live.push_targets, "the push stream")
        [pushed] = await live.hub.dispatch([chat_message("m-1")])
        assert pushed.outcome is DispatchOutcome.DELIVERED
        transport = live.mcp.manager._server_instances[session_id]
        assert GET_STREAM_KEY not in transport._request_streams, sdk_changed(
            "a GET without Last-Event-ID reached the SDK's live stream (PushStreamFromHistory)"
        )


def test_eras_are_routed_by_the_protocol_version_header() -> None:
    assert (
        "2026-07-28" in MODERN_PROTOCOL_VERSIONS and "2026-07-28" not in HANDSHAKE_PROTOCOL_VERSIONS
    ), sdk_changed("the protocol eras were renumbered")
    assert {"2025-06-18", "2025-11-25"} <= set(HANDSHAKE_PROTOCOL_VERSIONS), sdk_changed(
        "a handshake version the hosts use (Codex 2025-06-18, the bridge 2025-11-25) is no longer served"
    )
    source = inspect.getsource(StreamableHTTPSessionManager._handle_request)
    assert "HANDSHAKE_PROTOCOL_VERSIONS" in source and "handle_modern_request" in source, (
        sdk_changed(
            "the session manager no longer routes eras by the MCP-Protocol-Version header "
            "(/mcp serves 2026-07-28 through its per-request path)"
        )
    )


async def test_a_modern_request_runs_with_no_session_and_discover_tells_the_servers_own_text() -> (
    None
):
    # McpService: a 2026-07-28 tool call has no session (session_id_of None), and its host hears the
    # server's own instructions (the inbox text) with no channel capability.
    server = ChannelServer("adapter-check", instructions="the inbox text")
    seen: list[tuple[str, str | None]] = []

    async def observe(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        seen.append((ctx.method, session_id_of(ctx.session)))
        return await call_next(ctx)

    server.middleware.append(observe)
    async with Client(server) as client:  # the default mode: server/discover at 2026-07-28
        assert client.protocol_version == LATEST_MODERN_VERSION, sdk_changed(
            "the default client no longer settles on 2026-07-28 with a server that serves it"
        )
        assert client.instructions == "the inbox text", sdk_changed(
            "server/discover no longer answers with Server.instructions"
        )
        assert CHANNEL_CAPABILITY not in (client.server_capabilities.experimental or {}), (
            sdk_changed("server/discover no longer passes its protocol_version to get_capabilities")
        )
    assert ("server/discover", None) in seen, sdk_changed(
        "a 2026-07-28 request no longer passes Server.middleware with a sessionless connection"
    )


async def test_any_model_with_method_and_params_goes_out_as_a_notification() -> None:
    sent: list[tuple[str, Any]] = []

    class Outbound:
        async def notify(self, method: str, params: Any, opts: Any = None) -> None:
            sent.append((method, params))

    connection = bare_connection(Outbound())
    session = ServerSession(object(), connection)  # type: ignore[arg-type]
    push = JSONRPCNotification(
        jsonrpc="2.0", method="notifications/claude/channel", params={"content": "x"}
    )
    await session.send_notification(push)  # type: ignore[arg-type]
    assert sent == [("notifications/claude/channel", {"content": "x"})], sdk_changed(
        "send_notification no longer sends a custom notification model on the standalone channel"
    )


def test_sessions_are_bound_to_the_principal_in_scope_user() -> None:
    source = inspect.getsource(StreamableHTTPSessionManager._handle_stateful_request)
    assert 'scope.get("user")' in source and "authorization_context(" in source, sdk_changed(
        "sessions are no longer bound to scope['user'] (bearer.BearerAuth sets it for exactly that)"
    )


async def test_a_requests_stream_is_attached_while_its_connection_lives_and_again_once_resumed(
    live: LiveMcp, http: httpx.AsyncClient
) -> None:
    # caller_line.py: the only sign that a tool's result would reach no connection, since the SDK does
    # not cancel the handler of a request whose connection closed.
    session_id = await open_raw_session(http, live.url, "codex")
    call = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "wait_for_sponsor", "arguments": {"chat_id": "19:demo@thread.v2"}},
    }
    attached = partial(live.mcp.manager.response_stream_attached, session_id)
    async with http.stream(
        "POST", live.url, json=call, headers=session_headers(session_id)
    ) as response:
        priming = await anext(
            line[3:].strip() async for line in response.aiter_lines() if line.startswith("id:")
        )
        await eventually(lambda: live.hub.live_targets(), "the demo wait")
        assert attached(7) and not attached(8), sdk_changed(
            "a request's stream is not in `_request_streams`"
        )
    await eventually(
        lambda: not attached(7), sdk_changed("a closed connection leaves its request's stream")
    )
    assert live.hub.live_targets(), (
        "the SDK now cancels a handler whose connection closed: see caller_line.py"
    )
    headers = {**session_headers(session_id), "Last-Event-ID": priming}
    async with http.stream("GET", live.url, headers=headers) as resumed:
        assert resumed.status_code == 200
        await eventually(
            lambda: attached(7), sdk_changed("a resumed request stream is not attached again")
        )
        await live.hub.dispatch(
            [chat_message("m-1")]
        )  # the demo wait answers on the resumed stream

"""Every use of the MCP SDK's private attributes or unusual extension points, in one place.

``mcp`` is pinned to 2.3.x. ``tests/mcp/test_sdk_adapter.py`` checks each assumption made here and
fails with "the mcp SDK changed: ..." when an upgrade breaks one, so the fix starts in this file.

What we need that the SDK has no public option for:
- the experimental capability ``claude/channel`` in the initialize result;
- the session behind a request (its id, and a hook for when it ends), which lives on the private
  ``Connection`` of a ``ServerSession``;
- one event history per session (the manager shares one ``EventStore`` across sessions, and stream
  ids repeat across sessions);
- keeping hosts on the handshake era: only that era has the session GET stream that pushes ride on;
- serving every push connection from the session's event history, which the SDK does only for a GET
  with ``Last-Event-ID`` (why, and what that relies on: ``event_store``'s docstring);
- whether a request's response stream still has a connection (``caller_line``): the SDK does not cancel
  a handler whose host's connection closed, and says nothing when it writes the result to none.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server import Server
from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
from mcp.server.connection import Connection
from mcp.server.session import ServerSession
from mcp.server.streamable_http import LAST_EVENT_ID_HEADER, StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.inbound import ERROR_CODE_HTTP_STATUS, MCP_PROTOCOL_VERSION_HEADER
from mcp_types import UNSUPPORTED_PROTOCOL_VERSION, ServerCapabilities
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Receive, Scope, Send

from service.mcp.event_store import PUSH_STREAM_CURSOR, InMemoryEventStore

CHANNEL_CAPABILITY = "claude/channel"
"""Declared under ``capabilities.experimental``; Claude Code listens for channel pushes only then."""
PERMISSION_CAPABILITY = "claude/channel/permission"
"""Declared by a channel server that relays Claude Code's permission prompts (Claude Code 2.1.81+)."""
PERMISSION_REQUEST_METHOD = "notifications/claude/channel/permission_request"
"""Claude Code → its channel server; the bridge forwards it to the fleet on its own session, the only
way a sponsor is asked: a notification no tool call (so no model) can send."""

# The newest era that keeps a session and its GET stream (2026-07-28 has neither).
PUSH_ERA_VERSIONS: tuple[str, ...] = HANDSHAKE_PROTOCOL_VERSIONS

_PROTOCOL_HEADER = MCP_PROTOCOL_VERSION_HEADER.encode("ascii")
_LAST_EVENT_ID = LAST_EVENT_ID_HEADER.encode("ascii")


class ChannelServer(Server[Any]):
    """The low-level server, declaring ``claude/channel`` in every capabilities answer.

    The streamable-HTTP manager builds the initialize result from ``create_initialization_options()``
    with no arguments, so the experimental capability can only enter through ``get_capabilities``.
    """

    def __init__(
        self,
        *args: Any,
        experimental: Callable[[], dict[str, dict[str, Any]]] = dict,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._experimental = (
            experimental  # asked at each handshake: what is declared may change at start-up
        )

    def get_capabilities(
        self,
        notification_options: Any = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
        *,
        protocol_version: str | None = None,
    ) -> ServerCapabilities:
        experimental = {
            **(experimental_capabilities or {}),
            **self._experimental(),
            CHANNEL_CAPABILITY: {},
        }
        return super().get_capabilities(
            notification_options, experimental, extensions, protocol_version=protocol_version
        )


def _connection(session: ServerSession) -> Connection:
    connection = getattr(session, "_connection", None)
    if not isinstance(connection, Connection):
        raise RuntimeError(
            "the mcp SDK changed: ServerSession no longer holds its Connection in `_connection`; "
            "update service/mcp/sdk_adapter.py"
        )
    return connection


def session_id_of(session: ServerSession) -> str | None:
    """The streamable-HTTP session id of the connection a request arrived on (None when stateless)."""
    return _connection(session).session_id


def call_when_session_ends(session: ServerSession, callback: Callable[[], Awaitable[None]]) -> None:
    """Run ``callback`` once the session's connection closes: DELETE, idle expiry, crash or shutdown.

    The SDK unwinds a connection's ``exit_stack`` on every one of those paths (shielded and bounded).
    """
    _connection(session).exit_stack.push_async_callback(callback)


class PerSessionEventStoreManager(StreamableHTTPSessionManager):
    """The SDK's session manager, with each session's transport given its own event history."""

    def __init__(
        self, app: Server[Any], *, event_stores: InMemoryEventStore | None, **kwargs: Any
    ) -> None:
        super().__init__(app, event_store=None, **kwargs)
        self._event_stores = event_stores

    def _admit_session(
        self, requestor: AuthorizationContext | None
    ) -> StreamableHTTPServerTransport | None:
        transport = super()._admit_session(requestor)
        if transport is not None and self._event_stores is not None:
            session_id = transport.mcp_session_id
            if session_id is None or not hasattr(transport, "_event_store"):
                raise RuntimeError(
                    "the mcp SDK changed: a stateful transport has no session id or no `_event_store`; "
                    "update service/mcp/sdk_adapter.py"
                )
            transport._event_store = self._event_stores.for_session(session_id)
        return transport

    def response_stream_attached(self, session_id: str, request_id: str | int) -> bool:
        """Whether the response stream of request ``request_id`` in session ``session_id`` has a connection.

        The transport keeps a request's stream in ``_request_streams`` (keyed by the JSON-RPC id as a
        string) from the POST's arrival until its SSE writer ends: the answer went out, or the connection
        closed. A resume with ``Last-Event-ID`` puts it back once the replay is written.
        """
        instances = getattr(self, "_server_instances", None)
        transport = instances.get(session_id) if isinstance(instances, dict) else None
        streams = getattr(transport, "_request_streams", None)
        if not isinstance(instances, dict) or (
            transport is not None and not isinstance(streams, dict)
        ):
            # Never guess "gone": every wait would then hand its reply back.
            raise RuntimeError(
                "the mcp SDK changed: the manager's `_server_instances` or a transport's `_request_streams` "
                "is no longer a dict; update service/mcp/sdk_adapter.py"
            )
        return isinstance(streams, dict) and str(request_id) in streams


class PushStreamFromHistory:
    """Every GET push stream resumes: one without ``Last-Event-ID`` asks for ``PUSH_STREAM_CURSOR``.

    The SDK serves a GET without ``Last-Event-ID`` from a live stream of its own, which the session's
    router writes to directly; with the header it asks the event store, and ``SessionEventStore``
    then serves the whole connection from the session's history. Every connection served one way
    means one writer for the push stream, and no hand-off between a replay and a live stream. An
    empty header counts as none, as it does for the SDK. The SDK's 409 for a second GET stream goes
    with its live stream: a newer push connection takes the stream over from the older one.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            headers = scope["headers"]
            if not any(k == _LAST_EVENT_ID and v for k, v in headers):
                kept = [(k, v) for k, v in headers if k != _LAST_EVENT_ID]
                scope = {
                    **scope,
                    "headers": [*kept, (_LAST_EVENT_ID, PUSH_STREAM_CURSOR.encode("ascii"))],
                }
        await self.app(scope, receive, send)


class HandshakeEraOnly:
    """Refuse requests for a protocol era without sessions, so hosts fall back to the handshake.

    The manager routes by the ``MCP-Protocol-Version`` header: a version outside the handshake era
    goes to a per-request path with no session and no GET stream, where pushes are dropped. A
    ``mode="auto"`` Python client probes ``server/discover`` at 2026-07-28 first; answering
    UNSUPPORTED_PROTOCOL_VERSION with only handshake versions in ``supported`` makes it fall back to
    ``initialize``, which the server always settles on a handshake version.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            requested = next(
                (v.decode("latin-1") for k, v in scope["headers"] if k == _PROTOCOL_HEADER), None
            )
            if requested is not None and requested not in PUSH_ERA_VERSIONS:
                await _refuse_era(requested, await _request_id(receive), send)
                return
        await self.app(scope, receive, send)


# The refusal is the answer to one small JSON-RPC request (server/discover, initialize): a larger
# body is not read further, and is answered with a null id as a parse failure would be.
_ID_READ_LIMIT = 64 * 1024


async def _request_id(receive: Receive) -> str | int | None:
    """The JSON-RPC id of the refused request, so the error answers it (JSON-RPC 2.0 §5: the id of
    the request; null only when it could not be determined)."""
    body = b""
    while len(body) <= _ID_READ_LIMIT:
        message = await receive()
        if message["type"] != "http.request":
            return None
        body += message.get("body", b"")
        if not message.get("more_body", False):
            break
    else:
        return None
    try:
        request = json.loads(body)
    except ValueError:
        return None
    request_id = request.get("id") if isinstance(request, dict) else None
    # JSON-RPC ids are strings or numbers; a bool is an int to Python but not an id.
    return (
        request_id
        if isinstance(request_id, (str, int)) and not isinstance(request_id, bool)
        else None
    )


async def _refuse_era(requested: str, request_id: str | int | None, send: Send) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {
            "code": UNSUPPORTED_PROTOCOL_VERSION,
            "message": "Unsupported protocol version: this server serves the initialize handshake era only",
            "data": {"supported": list(PUSH_ERA_VERSIONS), "requested": requested},
        },
    }
    payload = json.dumps(body, separators=(",", ":")).encode()
    await send(
        {
            "type": "http.response.start",
            "status": ERROR_CODE_HTTP_STATUS.get(UNSUPPORTED_PROTOCOL_VERSION, 400),
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})

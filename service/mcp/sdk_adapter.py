"""Every use of the MCP SDK's private attributes or unusual extension points, in one place.

``mcp`` is pinned to 2.3.x. ``tests/mcp/test_sdk_adapter.py`` checks each assumption made here and
fails with "the mcp SDK changed: ..." when an upgrade breaks one, so the fix starts in this file.

What we need that the SDK has no public option for:
- the experimental capability ``claude/channel`` in the bridge's initialize result (``ChannelServer``);
- the session behind a request (its id, and a hook for when it ends), which lives on the private
  ``Connection`` of a ``ServerSession``;
- one event history per session (the manager shares one ``EventStore`` across sessions, and stream
  ids repeat across sessions);
- serving every push connection from the session's event history, which the SDK does only for a GET
  with ``Last-Event-ID`` (why, and what that relies on: ``event_store``'s docstring);
- whether a request's response stream still has a connection (``caller_line``): the SDK does not cancel
  a handler whose host's connection closed, and says nothing when it writes the result to none.

What /mcp relies on the SDK doing by itself (checked there too): the session manager serves both
protocol eras on one endpoint, chosen per request by the ``MCP-Protocol-Version`` header. A
handshake-era version (2025-06-18, 2025-11-25), or none as on ``initialize``, goes to the stateful
sessions with their GET push stream. Any other version goes to its per-request 2026-07-28 path
(``handle_modern_request``): no ``initialize``, no ``Mcp-Session-Id``, no GET stream (405), client
notifications answered 202 and dropped, each request's protocol version and client capabilities taken
from its ``_meta``, and ``server/discover`` answered from the server's ``instructions`` and
``get_capabilities(protocol_version=...)``. Such a request runs on a ``Connection`` with no session
id (``session_id_of`` gives None) and leaves nothing behind, so any replica can serve it; its handler
is cancelled when the host's connection closes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server import Server
from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
from mcp.server.connection import Connection
from mcp.server.session import ServerSession
from mcp.server.streamable_http import LAST_EVENT_ID_HEADER, StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp_types import ServerCapabilities
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Receive, Scope, Send

from service.mcp.event_store import PUSH_STREAM_CURSOR, InMemoryEventStore

CHANNEL_CAPABILITY = "claude/channel"
"""Declared under ``capabilities.experimental``; Claude Code listens for channel pushes only then."""
PERMISSION_CAPABILITY = "claude/channel/permission"
"""Declared by a channel server that relays Claude Code's permission prompts (Claude Code 2.1.81+)."""
PERMISSION_REQUEST_METHOD = "notifications/claude/channel/permission_request"
"""Claude Code → its channel server; the bridge forwards it to the fleet on its own session, the only
way a sponsor is asked: a notification no tool call (so no model) can send."""

_LAST_EVENT_ID = LAST_EVENT_ID_HEADER.encode("ascii")


class ChannelServer(Server[Any]):
    """The low-level server, declaring ``claude/channel`` in every handshake-era capabilities answer.

    The channel bridge's stdio server: its host is Claude Code, always a push host. The initialize
    result is built from ``create_initialization_options()`` with no arguments, so the experimental
    capability can only enter through ``get_capabilities``. A 2026-07-28 answer (``server/discover``)
    never declares it: that era has no session and no slot for a server's own notifications.
    """

    def get_capabilities(
        self,
        notification_options: Any = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
        *,
        protocol_version: str | None = None,
    ) -> ServerCapabilities:
        experimental = dict(experimental_capabilities or {})
        if protocol_version not in MODERN_PROTOCOL_VERSIONS:
            experimental[CHANNEL_CAPABILITY] = {}
        return super().get_capabilities(
            notification_options,
            experimental or None,
            extensions,
            protocol_version=protocol_version,
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

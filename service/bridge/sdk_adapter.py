"""The bridge's one use of the MCP SDK's client internals: a push stream that survives the fleet.

``mcp`` is pinned to 2.3.x; ``tests/bridge/test_bridge_sdk_adapter.py`` checks every assumption made
here and fails with "the mcp SDK changed: ..." when an upgrade breaks one.

Why an adapter at all: the SDK's streamable-HTTP client opens the session's GET stream and resumes it
with ``Last-Event-ID``, but gives up after two failed attempts with a fixed delay, silently, and treats
a 404 (the replica no longer knows the session) like any other failure. The bridge must keep the
stream while the session lives (backoff with jitter, no attempt cap) and learn at once when the
session is gone, so it can initialize a new one. ``handle_get_stream`` is replaced, and
``_handle_post_request`` is wrapped so a POST that dies on the wire fails that one message rather
than the session (the SDK lets the error end its POST writer: every later message of the session
fails, python-sdk #3522); the SSE parsing and the message routing stay the SDK's.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
from mcp.client import Client
from mcp.client.session import ClientSession
from mcp.client._transport import TransportStreams
from mcp.client.streamable_http import (
    LAST_EVENT_ID,
    RequestContext,
    StreamableHTTPTransport,
    StreamWriter,
)
from mcp.shared._context_streams import create_context_streams
from mcp.shared._httpx_utils import sse_within_origin
from mcp.shared.message import SessionMessage
from mcp_types import CONNECTION_CLOSED, JSONRPCNotification, JSONRPCRequest
from pydantic import BaseModel

from service.bridge.backoff import Backoff
from service.bridge.fleet_failures import never_connected, unreachable

log = logging.getLogger(__name__)


def _require(condition: bool, what: str) -> None:
    if not condition:
        raise RuntimeError(f"the mcp SDK changed: {what}; update service/bridge/sdk_adapter.py")


_require(
    hasattr(StreamableHTTPTransport, "handle_get_stream"),
    "StreamableHTTPTransport has no handle_get_stream",
)
_require(
    hasattr(StreamableHTTPTransport, "post_writer"), "StreamableHTTPTransport has no post_writer"
)
_require(
    hasattr(StreamableHTTPTransport, "_handle_post_request"),
    "StreamableHTTPTransport has no _handle_post_request",
)
_require(
    hasattr(StreamableHTTPTransport, "_resolve_abandoned_request"),
    "StreamableHTTPTransport has no _resolve_abandoned_request",
)
_require(hasattr(ClientSession, "send_notification"), "ClientSession has no send_notification")


class _ClientNotification(BaseModel):
    method: str
    params: dict[str, Any]


async def send_client_notification(client: Client, method: str, params: dict[str, Any]) -> None:
    """A notification of a method the SDK does not know (``ClientNotification`` is a closed union).

    ``ClientSession.send_notification`` only dumps the model it is given, so any model with ``method``
    and ``params`` goes out as is.
    """
    await client.session.send_notification(_ClientNotification(method=method, params=params))  # type: ignore[arg-type]


class ResumingStreamTransport(StreamableHTTPTransport):
    """The SDK's transport with a GET stream that reconnects with backoff and jitter while the session lives."""

    def __init__(
        self,
        url: str,
        *,
        backoff: Backoff,
        session_gone: anyio.Event,
        on_stream_open: Callable[[bool], None] = lambda resumed: None,
        on_stream_error: Callable[[str], None] = lambda reason: None,
        on_notification_lost: Callable[
            [JSONRPCNotification, str], None
        ] = lambda notification, reason: None,
    ) -> None:
        super().__init__(url)
        self._backoff = backoff
        self._session_gone = session_gone
        self._on_stream_open = on_stream_open
        self._on_stream_error = on_stream_error
        self._on_notification_lost = on_notification_lost

    async def _handle_post_request(self, ctx: RequestContext) -> None:
        """The SDK's POST, with a failure on the wire (a reset, a cut, a timeout) kept to its message: a
        request is answered with a connection-closed error, as the SDK answers a request whose stream it
        cannot resume; a notification is handed to ``on_notification_lost`` (an acknowledgement is sent
        again). The session and its push stream go on; a replica that no longer knows the session still
        answers 404, which ends it."""
        try:
            await super()._handle_post_request(ctx)
        except httpx2.TransportError as exc:
            message = ctx.session_message.message
            if never_connected(exc):
                # No connection opened, so the fleet saw nothing: the host may simply call again.
                broke = said = unreachable(self.url, exc)
            else:
                # The replica may have read the request before the connection broke: say so, since a
                # host that retries a send must know it may have gone out (the send tools settle it).
                cause = type(exc).__name__
                broke = (
                    f"the connection to the fleet at {self.url} broke before its answer ({cause})"
                )
                said = f"{broke}; the call may or may not have run"
            if isinstance(message, JSONRPCRequest):
                await self._resolve_abandoned_request(
                    ctx.read_stream_writer, message.id, said, code=CONNECTION_CLOSED
                )
            elif isinstance(message, JSONRPCNotification):
                self._on_notification_lost(message, broke)
            else:
                raise

    async def handle_get_stream(
        self, client: httpx2.AsyncClient, read_stream_writer: StreamWriter
    ) -> None:
        last_event_id: str | None = None
        failures = 0
        while self.session_id and not self._session_gone.is_set():
            headers = self._prepare_headers()
            if last_event_id is not None:
                headers[LAST_EVENT_ID] = last_event_id
            try:
                async with sse_within_origin(
                    client, self.url, headers=headers, max_event_size=self.max_sse_event_size
                ) as source:
                    status = source.response.status_code
                    if status == 404:
                        # The replica does not know the session (it restarted, or the ingress moved us):
                        # nothing can be resumed; the connection initializes a new session.
                        self._session_gone.set()
                        return
                    if status != 200:
                        raise _StreamRefused(status)
                    failures = 0
                    self._on_stream_open(last_event_id is not None)
                    async for event in source:
                        if event.id:
                            last_event_id = event.id
                        await self._handle_sse_event(event, read_stream_writer)
            except (
                httpx2.HTTPError,
                _StreamRefused,
                anyio.EndOfStream,
                anyio.BrokenResourceError,
            ) as exc:
                if not (isinstance(exc, _StreamRefused) and exc.status >= 400):
                    # An error status is the connection's to say: its response hook sees each one with
                    # the challenge, and saying it here too would alternate two lines per retry.
                    self._on_stream_error(_reason(exc, self.url))
            failures += 1
            await anyio.sleep(self._backoff.delay(failures))


class _StreamRefused(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"the fleet answered the push stream with HTTP {status}")
        self.status = status


def _reason(exc: BaseException, url: str) -> str:
    if isinstance(exc, _StreamRefused):
        return str(exc)
    if never_connected(exc):
        return unreachable(url, exc)
    return f"push stream dropped ({type(exc).__name__})"


@asynccontextmanager
async def resuming_http_client(
    transport: ResumingStreamTransport, http_client: httpx2.AsyncClient
) -> AsyncGenerator[TransportStreams, None]:
    """``mcp.client.streamable_http.streamable_http_client`` with our transport in place of the SDK's.

    Mirrors that function's body (mcp 2.3): the SDK builds its transport inside and offers no way to
    pass another.
    """
    read_writer, read_stream = create_context_streams[SessionMessage | Exception](0)
    write_stream, write_reader = create_context_streams[SessionMessage](0)
    async with (
        read_writer,
        read_stream,
        write_stream,
        write_reader,
        anyio.create_task_group() as group,
    ):

        def start_get_stream() -> None:
            group.start_soon(transport.handle_get_stream, http_client, read_writer)

        group.start_soon(
            transport.post_writer,
            http_client,
            write_reader,
            read_writer,
            write_stream,
            start_get_stream,
            group,
        )
        try:
            yield read_stream, write_stream
        finally:
            if transport.session_id and not transport._session_gone.is_set():
                with contextlib.suppress(Exception), anyio.move_on_after(2.0):
                    await transport.terminate_session(http_client)
            group.cancel_scope.cancel()

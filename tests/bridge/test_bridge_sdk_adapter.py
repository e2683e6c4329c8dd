"""Canary: the mcp SDK internals service/bridge/sdk_adapter.py relies on are still there and still mean the same."""

from __future__ import annotations

import inspect

from mcp.client import streamable_http
from mcp.client.streamable_http import StreamableHTTPTransport, streamable_http_client

from service.bridge import sdk_adapter


def test_the_sdk_transport_still_has_the_hooks_the_adapter_overrides_or_calls() -> None:
    for name in (
        "handle_get_stream",
        "post_writer",
        "_prepare_headers",
        "_handle_sse_event",
        "terminate_session",
    ):
        assert hasattr(StreamableHTTPTransport, name), (
            f"the mcp SDK changed: StreamableHTTPTransport.{name} is gone"
        )
    params = list(inspect.signature(StreamableHTTPTransport.handle_get_stream).parameters)
    assert params == ["self", "client", "read_stream_writer"], (
        f"the mcp SDK changed: handle_get_stream{params}"
    )
    writer = list(inspect.signature(StreamableHTTPTransport.post_writer).parameters)
    assert writer[1:] == [
        "client",
        "write_stream_reader",
        "read_stream_writer",
        "write_stream",
        "start_get_stream",
        "tg",
    ], f"the mcp SDK changed: post_writer{writer}"
    assert streamable_http.LAST_EVENT_ID == "last-event-id"
    post = list(inspect.signature(StreamableHTTPTransport._handle_post_request).parameters)
    assert post == ["self", "ctx"], f"the mcp SDK changed: _handle_post_request{post}"
    resolve = list(inspect.signature(StreamableHTTPTransport._resolve_abandoned_request).parameters)
    assert resolve[1:] == ["read_stream_writer", "request_id", "message", "code"], (
        f"the mcp SDK changed: _resolve_abandoned_request{resolve}"
    )


def test_the_sdk_post_writer_still_lets_a_notifications_failed_post_end_it() -> None:
    # Why the adapter wraps _handle_post_request (python-sdk #3522): a notification's POST is awaited
    # inline, so its transport error leaves the writer's loop. When the SDK contains it, drop the wrap.
    source = inspect.getsource(StreamableHTTPTransport.post_writer)
    assert (
        "await handle_request_async()" in source
        and 'logger.exception("Error in post_writer")' in source
    )


def test_the_sdk_client_still_builds_its_transport_inside_streamable_http_client() -> None:
    # If the SDK ever accepts a transport (or a reconnect policy) here, the adapter's copy can go.
    source = inspect.getsource(streamable_http_client)
    assert "StreamableHTTPTransport(url" in source, (
        "the mcp SDK changed: streamable_http_client; revisit the adapter"
    )
    assert "start_get_stream" in source and "post_writer" in source


def test_the_sdk_still_gives_up_on_the_get_stream_after_a_few_attempts() -> None:
    # The reason the adapter exists; when the SDK retries without a cap, the override may be dropped.
    assert streamable_http.MAX_RECONNECTION_ATTEMPTS <= 5
    assert issubclass(sdk_adapter.ResumingStreamTransport, StreamableHTTPTransport)

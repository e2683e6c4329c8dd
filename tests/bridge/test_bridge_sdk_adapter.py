"""Canary: the mcp SDK internals service/bridge/sdk_adapter.py relies on are still there and still mean the same."""

from __future__ import annotations

import inspect

from mcp.client import streamable_http
from mcp.client.streamable_http import StreamableHTTPTransport, streamable_http_client

from service.bridge import sdk_adapter


def test_the_sdk_transport_still_has_the_hooks_the_adapter_overrides_or_calls() -> None:
    for name in ("handle_get_stream", "post_writer", "_prepare_headers", "_handle_sse_event", "terminate_session"):
        assert hasattr(StreamableHTTPTransport, name), f"the mcp SDK changed: StreamableHTTPTransport.{name} is gone"
    params = list(inspect.signature(StreamableHTTPTransport.handle_get_stream).parameters)
    assert params == ["self", "client", "read_stream_writer"], f"the mcp SDK changed: handle_get_stream{params}"
    writer = list(inspect.signature(StreamableHTTPTransport.post_writer).parameters)
    assert writer[1:] == ["client", "write_stream_reader", "read_stream_writer", "write_stream",
                          "start_get_stream", "tg"], f"the mcp SDK changed: post_writer{writer}"
    assert streamable_http.LAST_EVENT_ID == "last-event-id"


def test_the_sdk_client_still_builds_its_transport_inside_streamable_http_client() -> None:
    # If the SDK ever accepts a transport (or a reconnect policy) here, the adapter's copy can go.
    source = inspect.getsource(streamable_http_client)
    assert "StreamableHTTPTransport(url" in source, "the mcp SDK changed: streamable_http_client; revisit the adapter"
    assert "start_get_stream" in source and "post_writer" in source


def test_the_sdk_still_gives_up_on_the_get_stream_after_a_few_attempts() -> None:
    # The reason the adapter exists; when the SDK retries without a cap, the override may be dropped.
    assert streamable_http.MAX_RECONNECTION_ATTEMPTS <= 5
    assert issubclass(sdk_adapter.ResumingStreamTransport, StreamableHTTPTransport)

"""Keep the host on the handshake era over stdio: the one where ``notifications/claude/channel`` flows.

MCP 2026-07-28 has no session and defines no slot for a server's own notifications outside
``subscriptions/listen``, whose types do not include channel events. A host that probes it first
(Claude Code sends ``server/discover`` at 2026-07-28, then falls back to ``initialize``: read in its
channels reference and MCP's 2026-07-28 changelog, not run here) must hear "not supported" and fall
back. The SDK's stdio ``Server.run`` would instead serve whichever era the first request picks; so
the bridge drives the handshake-only loop (``serve_loop``) behind this filter, which answers any
2026-07-28-enveloped request with UNSUPPORTED_PROTOCOL_VERSION naming the handshake versions. (The
fleet's ``/mcp`` serves 2026-07-28 hosts statelessly, without pushes; the bridge exists for pushes.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio
from anyio.abc import ObjectReceiveStream, ObjectSendStream
from mcp_types import (
    PROTOCOL_VERSION_META_KEY,
    UNSUPPORTED_PROTOCOL_VERSION,
    ErrorData,
    JSONRPCError,
    JSONRPCRequest,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from mcp.shared.message import SessionMessage

Inbound = SessionMessage | Exception


def modern_version_requested(request: JSONRPCRequest) -> str | None:
    """The 2026-07-28+ version a request's envelope asks for, or None for a handshake-era request."""
    if request.method == "initialize":
        return None
    params: Any = request.params
    meta = params.get("_meta") if isinstance(params, Mapping) else None
    if isinstance(meta, Mapping) and PROTOCOL_VERSION_META_KEY in meta:
        return str(meta[PROTOCOL_VERSION_META_KEY])
    return None


def era_refusal(request: JSONRPCRequest, requested: str) -> SessionMessage:
    error = ErrorData(
        code=UNSUPPORTED_PROTOCOL_VERSION,
        message="Unsupported protocol version: this channel serves the initialize handshake era only",
        data={"supported": list(HANDSHAKE_PROTOCOL_VERSIONS), "requested": requested},
    )
    return SessionMessage(JSONRPCError(jsonrpc="2.0", id=request.id, error=error))


async def guard_handshake_era(
    host_in: ObjectReceiveStream[Inbound],
    to_server: ObjectSendStream[Inbound],
    host_out: ObjectSendStream[SessionMessage],
) -> None:
    """Relay the host's messages to the server, answering 2026-07-28 requests itself."""
    async with to_server:
        async for item in host_in:
            if isinstance(item, SessionMessage) and isinstance(item.message, JSONRPCRequest):
                requested = modern_version_requested(item.message)
                if requested is not None:
                    await host_out.send(era_refusal(item.message, requested))
                    continue
            try:
                await to_server.send(item)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                return

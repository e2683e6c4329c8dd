"""What the bridge tells the host's log when the fleet fails it: one plain line per cause, never a
body or a token."""

from __future__ import annotations

import httpx2
from mcp.shared.exceptions import MCPError
from mcp_types import PARSE_ERROR, REQUEST_TIMEOUT

from service.bridge.auth import TokenUnavailable


def status_reason(status: int) -> str:
    if status == 401:
        return "the fleet answered 401: the token was refused; check ENTRABOT_BRIDGE_TOKEN or the Entra audience"
    if status == 403:
        return "the fleet answered 403: the token is valid but not allowed; check the fleet's allowed callers"
    if status == 421:
        return "the fleet answered 421: its allowed hosts do not include this URL's host"
    if status >= 500:
        return f"the fleet answered {status}: the replica failed; retrying"
    return f"the fleet answered {status}"


def describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        inner = exc.exceptions[0] if exc.exceptions else exc
        return describe(inner)
    if isinstance(exc, MCPError):
        if exc.error.code == REQUEST_TIMEOUT:
            return "the fleet did not answer in time"
        if exc.error.code == PARSE_ERROR or exc.error.message.startswith("Failed to parse"):
            # The SDK's message quotes the body; the body stays out of the log.
            return "the fleet answered something that is not MCP (unparseable JSON-RPC)"
        first_line = exc.error.message.splitlines()[0] if exc.error.message else ""
        return f"the fleet refused the session: {first_line[:160]}"
    if isinstance(exc, TokenUnavailable):
        return str(exc)
    if isinstance(exc, httpx2.TimeoutException | TimeoutError):
        return "the fleet did not answer in time"
    if isinstance(exc, httpx2.ConnectError):
        return "the fleet cannot be reached (connection refused or no route)"
    if isinstance(exc, httpx2.HTTPError):
        return f"the fleet connection failed ({type(exc).__name__})"
    return f"the fleet answered something that is not MCP ({type(exc).__name__})"

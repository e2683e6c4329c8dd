"""What the bridge says when the fleet fails it: one plain line per cause, naming what to fix, never a
body or a token. The same line goes to the host's log (stderr) and, for a tool call, to the model."""

from __future__ import annotations

import re

import httpx2
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, PARSE_ERROR, REQUEST_TIMEOUT

from service.bridge.auth import TokenUnavailable
from service.bridge.config import FLEET_URL_ENV, CredentialSource, StaticTokenSource

SDK_STATUS_STANDIN = "Server returned an error response"
"""What the mcp SDK (2.3) resolves a request with when the fleet answers it with an HTTP error status
and no JSON-RPC error; the status itself is only seen by the bridge's response hook."""

_CHALLENGE_PARAM = re.compile(r'(\w+)="([^"]*)"')


def status_reason(status: int, url: str, credential: CredentialSource, challenge: str = "") -> str:
    """Why the fleet at ``url`` answered ``status``; ``challenge`` is its WWW-Authenticate header."""
    if status == 401:
        return f"the fleet at {url} refused the bridge's token (401): {_token_fix(credential)}"
    if status == 403:
        return f"the fleet at {url} {_forbidden(dict(_CHALLENGE_PARAM.findall(challenge)), credential)}"
    if status == 421:
        return f"the fleet at {url} answered 421: its allowed hosts do not include this URL's host"
    if status >= 500:
        return f"the fleet at {url} answered {status}: the replica failed"
    return f"the fleet at {url} answered {status}"


def _token_fix(credential: CredentialSource) -> str:
    if isinstance(credential, StaticTokenSource):
        return (
            f"{credential.origin} does not hold one of the fleet's ENTRABOT_MCP_STATIC_TOKENS; "
            "fix it, then restart the bridge"
        )
    return (
        f"check {credential.origin}: it must be the fleet's app ID URI, and the token must come from "
        "the fleet's tenant (az login --tenant ...); then restart the bridge"
    )


def _forbidden(params: dict[str, str], credential: CredentialSource) -> str:
    # The fleet's 403 is RFC 6750's insufficient_scope, naming in ``scope`` what would have been
    # enough (service/mcp/bearer.py); anything else (an ingress, an Origin check) is said as is.
    if params.get("error") != "insufficient_scope":
        return "answered 403: the request was not allowed; check the fleet's ingress and allowed origins"
    wanted = params.get("scope", "")
    lacks = f"one of the app roles or scopes {wanted}" if wanted else "a required app role or scope"
    return (
        f"accepted the token but refused it (403 insufficient_scope): it lacks {lacks}, or its client "
        f"is not in the fleet's ENTRABOT_MCP_JWT_ALLOWED_CLIENT_IDS; grant that to the identity behind "
        f"{credential.origin} (docs/entra-app-registration.md), then restart the bridge"
    )


def unreachable(url: str, exc: BaseException) -> str:
    """A connection that never opened: the fleet cannot have seen anything of the request."""
    detail = "timed out" if isinstance(exc, httpx2.TimeoutException) else _first_line(exc)
    return (
        f"the fleet at {url} is not reachable ({detail}): nothing was sent; check that the fleet "
        f"runs and --fleet-url / {FLEET_URL_ENV}"
    )


def never_connected(exc: BaseException) -> bool:
    return isinstance(exc, httpx2.ConnectError | httpx2.ConnectTimeout)


def describe(exc: BaseException, url: str) -> str:
    if isinstance(exc, BaseExceptionGroup):
        inner = exc.exceptions[0] if exc.exceptions else exc
        return describe(inner, url)
    if isinstance(exc, MCPError):
        if exc.error.code == REQUEST_TIMEOUT:
            return f"the fleet at {url} did not answer in time"
        if exc.error.code == PARSE_ERROR or exc.error.message.startswith("Failed to parse"):
            # The SDK's message quotes the body; the body stays out of the log.
            return f"the fleet at {url} answered something that is not MCP (unparseable JSON-RPC)"
        first_line = exc.error.message.splitlines()[0] if exc.error.message else ""
        if exc.error.code == CONNECTION_CLOSED:
            return first_line  # the transport adapter's own words (sdk_adapter), already plain
        return f"the fleet at {url} refused the session: {first_line[:160]}"
    if isinstance(exc, TokenUnavailable):
        return str(exc)
    if never_connected(exc):
        return unreachable(url, exc)
    if isinstance(exc, httpx2.TimeoutException | TimeoutError):
        return f"the fleet at {url} did not answer in time"
    if isinstance(exc, httpx2.HTTPError):
        return f"the connection to the fleet at {url} failed ({type(exc).__name__})"
    return f"the fleet at {url} answered something that is not MCP ({type(exc).__name__})"


def _first_line(exc: BaseException) -> str:
    # httpx's ConnectError text is the OS's ("[Errno 111] Connection refused", "Name or service not
    # known"): no request data in it.
    text = (str(exc).splitlines() or [""])[0][:120]
    return text or type(exc).__name__

"""The process's one pooled HTTP client for Graph and Entra, built with the timeouts and limits we want."""

from __future__ import annotations

import httpx

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 30.0


def new_http_client(
    *,
    read_timeout_s: float = READ_TIMEOUT_S,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
    max_connections: int = 64,
    max_keepalive_connections: int = 16,
) -> httpx.AsyncClient:
    """Build it once at start-up (app wiring) and hand it to the GraphClient and the token provider.

    Redirects are not followed: a bearer token is never re-sent to wherever a 3xx points.
    """
    return httpx.AsyncClient(
        timeout=httpx.Timeout(read_timeout_s, connect=connect_timeout_s),
        limits=httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_keepalive_connections
        ),
        follow_redirects=False,
    )

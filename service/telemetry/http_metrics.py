"""ASGI middleware counting /mcp requests: method, status class, time to the response's start, in flight.

Time to the response's start, not to its end: a GET on /mcp is a push stream that stays open for the
session's life, so its full duration says nothing about how fast the replica answers.
"""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.telemetry.metrics import McpMetrics

_METHODS = frozenset({"GET", "POST", "DELETE", "OPTIONS"})


class McpHttpMetrics:
    def __init__(self, app: ASGIApp, *, metrics: McpMetrics, path: str = "/mcp") -> None:
        self._app = app
        self._metrics = metrics
        self._path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != self._path:
            await self._app(scope, receive, send)
            return
        method = scope["method"] if scope["method"] in _METHODS else "other"
        started = time.perf_counter()
        status: int | None = None

        async def timed_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                self._metrics.mcp_http_duration.labels(method).observe(
                    time.perf_counter() - started
                )
            await send(message)

        self._metrics.mcp_http_in_flight.inc()
        try:
            await self._app(scope, receive, timed_send)
        finally:
            self._metrics.mcp_http_in_flight.dec()
            # No response started: the app raised, and the server answers 500 (or the client left).
            self._metrics.mcp_http_requests.labels(method, f"{(status or 500) // 100}xx").inc()

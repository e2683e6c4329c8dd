"""The request shell around every non-admin route: request ids, injected faults and forced 429s,
and the statistics record (with the route template, not the raw URL).
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from emulator.context import EmulatorContext
from emulator.errors import EntraError, entra_error_body, graph_error_body
from emulator.stats import RequestRecord

ADMIN_PREFIX = "/_emulator"
GRAPH_PREFIX = "/v1.0"
_PARAM = re.compile(r"\{([^}:]+)(?::[^}]*)?\}")
_GRAPH_CODES = {
    400: "BadRequest",
    401: "InvalidAuthenticationToken",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    429: "TooManyRequests",
    500: "InternalServerError",
    502: "BadGateway",
    503: "ServiceUnavailable",
    504: "GatewayTimeout",
}


def route_template(path: str) -> str:
    """/v1.0/chats/{chat_id}/messages -> /v1.0/chats/{id}/messages; the tenant keeps its own name."""
    return _PARAM.sub(lambda m: "{tenant}" if m.group(1) == "tenant_id" else "{id}", path)


class EmulatorMiddleware:
    def __init__(self, app: ASGIApp, ctx: EmulatorContext, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self.ctx = ctx
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(ADMIN_PREFIX):
            await self.app(scope, receive, send)
            return
        ctx = self.ctx
        headers = Headers(scope=scope)
        request_id = str(uuid.uuid4())
        client_request_id = headers.get("client-request-id") or request_id
        state: dict[str, Any] = scope.setdefault("state", {})
        state.update(request_id=request_id, client_request_id=client_request_id)
        method, path = scope["method"], scope["path"]
        status = 500

        async def send_with_ids(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message.setdefault("headers", [])
                out = MutableHeaders(scope=message)
                out["request-id"] = request_id
                out["client-request-id"] = client_request_id
            await send(message)

        started, wall = time.monotonic(), datetime.now(timezone.utc)
        fault = ctx.faults.pick(method, path)
        forced = False
        try:
            if fault is not None and fault.latency_ms:
                await asyncio.sleep(fault.latency_ms / 1000)
            if fault is not None and fault.status and not fault.after_commit:
                await self._error(scope, receive, send_with_ids, fault.status, fault.retry_after)
            elif (
                path.startswith(GRAPH_PREFIX) and (retry := ctx.throttle.take_forced()) is not None
            ):
                forced = True
                await self._error(scope, receive, send_with_ids, 429, retry)
            elif fault is not None and fault.status and fault.after_commit:
                await self.app(scope, receive, _discard)
                await self._error(scope, receive, send_with_ids, fault.status, fault.retry_after)
            else:
                await self.app(scope, receive, send_with_ids)
        finally:
            ctx.stats.record(
                RequestRecord(
                    method=method,
                    route=self._template(scope),
                    path=path,
                    status=status,
                    app_id=state.get("app_id"),
                    user_id=state.get("user_id"),
                    monotonic=started,
                    wall=wall.isoformat(),
                    duration_ms=round((time.monotonic() - started) * 1000, 3),
                    fault=fault is not None and bool(fault.status),
                    throttled=forced or bool(state.get("throttled")),
                )
            )

    def _template(self, scope: Scope) -> str:
        route = scope.get("route")
        if route is None:  # answered before routing (a fault): find the route it would have reached
            route = _route_for(self.routes, scope)
        path = getattr(route, "path", None)
        return route_template(path) if path else "<unmatched>"

    async def _error(
        self, scope: Scope, receive: Receive, send: Send, status: int, retry_after: int | None
    ) -> None:
        ctx = self.ctx
        now = ctx.clock.now()
        headers = (
            {"Retry-After": str(retry_after if retry_after is not None else 1)}
            if status in (429, 503)
            else {}
        )
        if scope["path"].startswith(GRAPH_PREFIX):
            code = _GRAPH_CODES.get(status, "UnknownError")
            body = graph_error_body(
                code,
                f"Injected fault: the service answered {status}.",
                request_id=scope["state"]["request_id"],
                client_request_id=scope["state"]["client_request_id"],
                now=now,
            )
        else:
            err = EntraError(
                "temporarily_unavailable" if status >= 500 or status == 429 else "invalid_request",
                90033 if status >= 500 or status == 429 else 90100,
                "A transient error has occurred. Please try again."
                if status >= 500 or status == 429
                else "Injected fault: the request was refused.",
            )
            base = ctx.base_url or _base_of(scope)
            body = entra_error_body(
                err, now=now, authority=base, correlation_id=scope["state"]["client_request_id"]
            )
        await JSONResponse(body, status_code=status, headers=headers)(scope, receive, send)


async def _discard(message: Message) -> None:
    """The response of a request whose answer is lost after it took effect."""


def _base_of(scope: Scope) -> str:
    host = Headers(scope=scope).get("host", "localhost")
    return f"{scope.get('scheme', 'http')}://{host}"


def _route_for(routes: Sequence[BaseRoute], scope: Scope) -> BaseRoute | None:
    """The endpoint route a request would reach (for requests answered before routing)."""
    return next((r for r in routes if r.matches(scope)[0] is Match.FULL), None)

"""create_app: one emulated tenant (Entra token endpoint + Graph v1.0 + admin API) as a FastAPI app."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from emulator import (
    routes_admin,
    routes_admin_sign_in,
    routes_admin_teams,
    routes_admin_tokens,
    routes_channel_messages,
    routes_chats,
    routes_directory,
    routes_drives,
    routes_drives_admin,
    routes_entra,
    routes_mail,
    routes_mail_send,
    routes_messages,
    routes_notifications_admin,
    routes_subscriptions,
    routes_teams,
)
from emulator.clock import Clock, SystemClock
from emulator.context import EmulatorContext, context_of
from emulator.device_codes import DeviceAuthorizations
from emulator.drive_state import Drives
from emulator.errors import GraphError, graph_error_body
from emulator.faults import FaultInjector
from emulator.grants import TokenGrantor
from emulator.holds import Holds
from emulator.middleware import GRAPH_PREFIX, EmulatorMiddleware
from emulator.refresh_tokens import RefreshTokens

_ROUTE_MODULES = (
    routes_admin,
    routes_admin_sign_in,
    routes_admin_tokens,
    routes_entra,
    routes_chats,
    routes_messages,
    routes_mail,
    routes_mail_send,
    routes_directory,
    routes_subscriptions,
    routes_notifications_admin,
    # Teams, channels and channel messages.
    routes_admin_teams,
    routes_teams,
    routes_channel_messages,
    routes_drives,
    routes_drives_admin,
)
from emulator.seed import Seed, load_seed
from emulator.state import StateError, TenantState
from emulator.stats import RequestStats
from emulator.subscription_engine import SubscriptionEngine
from emulator.throttle import Throttle
from emulator.tokens import TokenService

_STATE_ERRORS = {
    "not_found": (404, "NotFound"),
    "forbidden": (403, "Forbidden"),
    "bad_request": (400, "BadRequest"),
}


def create_app(
    seed: Seed | Path | str | dict[str, Any],
    *,
    clock: Clock | None = None,
    base_url: str | None = None,
    signing_key: RSAPrivateKey | None = None,
    throttle_clock: Callable[[], float] | None = None,
    fractional_retry_after: bool = False,
) -> FastAPI:
    """An emulator for ``seed``. ``clock`` drives token lifetimes and message times (default: the
    system clock); ``base_url`` fixes the issuer and link host (default: each request's Host);
    ``signing_key`` is the tenant's token key (default: a fresh one; tests share one to start faster);
    ``throttle_clock`` is the monotonic clock of the throttling windows (default: time.monotonic; a
    ``ManualMonotonic`` makes limit tests count instead of time); ``fractional_retry_after`` answers a
    throttled request's exact wait instead of Graph's whole seconds (see emulator.throttle)."""
    tenant = load_seed(seed)
    clock = clock or SystemClock()
    tokens = TokenService(clock, tenant.token_lifetime_s, signing_key)
    state = TenantState(tenant, clock)
    subscriptions = SubscriptionEngine(
        tenant.subscriptions, clock, tenant.tenant_id, tenant.random_seed
    )
    state.add_observer(subscriptions.observe)
    device_codes = DeviceAuthorizations(
        tenant.device_code_lifetime_s, tenant.device_code_interval_s
    )
    refresh_tokens = RefreshTokens(tenant.refresh_token_lifetime_s)
    ctx = EmulatorContext(
        seed=tenant,
        clock=clock,
        state=state,
        tokens=tokens,
        grantor=TokenGrantor(
            tenant, tokens, clock, device_codes=device_codes, refresh_tokens=refresh_tokens
        ),
        device_codes=device_codes,
        refresh_tokens=refresh_tokens,
        throttle=Throttle(
            tenant.throttle,
            *([throttle_clock] if throttle_clock else []),
            fractional_retry_after=fractional_retry_after,
        ),
        faults=FaultInjector(tenant.random_seed),
        stats=RequestStats(),
        subscriptions=subscriptions,
        base_url=base_url.rstrip("/") if base_url else None,
        holds=Holds(),
    )
    app = FastAPI(title="Graph and Entra emulator", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.emulator = ctx
    app.state.drives = Drives(tenant, clock, tenant.drives)  # OneDrive state (routes_drives)
    for module in _ROUTE_MODULES:
        app.include_router(module.router)
    app.add_exception_handler(GraphError, _graph_error)  # type: ignore[arg-type]
    app.add_exception_handler(StateError, _state_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
    # The routers' own routes carry their full paths (the prefix is set on each router); the app's
    # list holds FastAPI's include wrappers, which carry none.
    endpoint_routes = [route for module in _ROUTE_MODULES for route in module.router.routes]
    app.add_middleware(EmulatorMiddleware, ctx=ctx, routes=endpoint_routes)
    return app


def _render(request: Request, err: GraphError) -> JSONResponse:
    ctx = context_of(request)
    state = request.scope.get("state", {})
    request_id = state.get("request_id") or "00000000-0000-0000-0000-000000000000"
    body = graph_error_body(
        err.code,
        err.message,
        request_id=request_id,
        client_request_id=state.get("client_request_id") or request_id,
        now=ctx.clock.now(),
    )
    return JSONResponse(body, status_code=err.status, headers=err.headers)


async def _graph_error(request: Request, err: GraphError) -> JSONResponse:
    return _render(request, err)


async def _state_error(request: Request, err: StateError) -> JSONResponse:
    status, code = _STATE_ERRORS[err.kind]
    return _render(request, GraphError(status, code, err.message))


async def _validation_error(request: Request, err: RequestValidationError) -> JSONResponse:
    problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors())
    return _render(request, GraphError(400, "BadRequest", f"Invalid request: {problems}"))


async def _http_error(request: Request, err: StarletteHTTPException) -> JSONResponse:
    if not request.url.path.startswith(GRAPH_PREFIX):
        return JSONResponse(
            {"error": {"code": str(err.status_code), "message": str(err.detail)}},
            status_code=err.status_code,
        )
    if err.status_code == 404:
        segment = request.url.path.rstrip("/").rsplit("/", 1)[-1]
        return _render(
            request,
            GraphError(400, "BadRequest", f"Resource not found for the segment '{segment}'."),
        )
    if err.status_code == 405:
        return _render(
            request,
            GraphError(
                405,
                "BadRequest",
                f"The HTTP method '{request.method}' is not allowed on this resource.",
            ),
        )
    return _render(request, GraphError(err.status_code, "UnknownError", str(err.detail)))

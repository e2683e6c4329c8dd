"""The MCP server of one replica: /mcp over streamable HTTP, in both protocol eras, channel pushes.

    mcp = McpService(options, PushDelivery(hub, metrics.delivery), metrics=metrics.mcp)
    mcp.tools.add(send_teams_message)              # any time before hosts list the tools
    app = FastAPI(routes=mcp.routes(), lifespan=...)   # enter `mcp.lifespan()` inside the app's lifespan

A request to /mcp passes, outermost first: the Host/Origin guard (421/403), bearer auth (401), the
session traffic observer (activity and GET streams), the push-stream layer (every GET stream is
served from the session's event history), then the SDK's session manager, which picks the era by the
request's ``MCP-Protocol-Version`` header (``sdk_adapter``'s docstring):

- the handshake era (2025-06-18, 2025-11-25): ``initialize`` opens a stateful session, pinned to this
  replica, with its GET push stream. The manager expires a session after
  ``McpOptions.session_idle_timeout_s`` without any request in flight (an open GET stream counts as
  one), answers DELETE by ending it, and 404 for an unknown session id; every ending reaches the
  session registry, which then unregisters the session's push target.
- 2026-07-28: each request stands alone (no session, no push stream), so any replica serves it; its
  tool calls run with no session (``ToolCall.session`` None) and the host takes messages through the
  tools.

Only a push host (a handshake-era session with a push-host name) is told of channel events, in its
initialize result; every other host gets the inbox instructions (``host_greeting``).

``service.from_settings.mcp.build_mcp`` builds one from the replica's settings.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import httpx
from mcp.server import Server
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp_types import (
    CallToolRequestParams,
    CallToolResult,
    InitializeRequestParams,
    ListToolsResult,
    NotificationParams,
    PaginatedRequestParams,
)
from pydantic import ConfigDict, ValidationError
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp

from service import __version__
from service.mcp.bearer import MCP_PATH, BearerAuth, protected_resource_routes
from service.mcp.caller_line import RESUME_GRACE_S, CallerLine
from service.delivery.inbox import Inbox
from service.mcp.acknowledging import ACK_METHOD, HOST_ID_HEADER, DeliveredParams
from service.mcp.event_store import InMemoryEventStore
from service.mcp.host_greeting import greet_push_host
from service.mcp.hosts import is_push_host
from service.mcp.instructions import HostInstructions
from service.mcp.options import McpOptions
from service.mcp.push_target import PushDelivery
from service.mcp.sdk_adapter import (
    PERMISSION_REQUEST_METHOD,
    PerSessionEventStoreManager,
    PushStreamFromHistory,
    call_when_session_ends,
    session_id_of,
)
from service.mcp.sessions import SessionRegistry, SessionState, SessionTrafficObserver
from service.mcp.tool_registry import SessionChannel, ToolCall, ToolRegistry, time_budget_of
from service.mcp.transport_security import HostOriginGuard, transport_security_settings
from service.mcp.verifiers import build_verifier
from service.telemetry.metrics import McpMetrics

log = logging.getLogger(__name__)

SERVER_NAME = "entrabot-fleet"
JWKS_TIMEOUT_S = 10.0


class McpService:
    """One replica's MCP server. Build a fresh one per app: the SDK's manager runs only once."""

    def __init__(
        self,
        options: McpOptions,
        pushes: PushDelivery,
        *,
        metrics: McpMetrics,
        tools: ToolRegistry | None = None,
        http_client: httpx.AsyncClient | None = None,
        instructions: HostInstructions | None = None,
        caller_grace_s: float = RESUME_GRACE_S,
        inbox: Inbox | None = None,
    ) -> None:
        self.options = options
        self.caller_grace_s = (
            caller_grace_s  # how long a dropped POST may take to resume (caller_line)
        )
        self.hub = pushes.hub
        self.keeper = pushes.keeper
        self.inbox = inbox
        self.tools = tools if tools is not None else ToolRegistry()
        self.event_stores = InMemoryEventStore()
        self.sessions = SessionRegistry(
            pushes,
            push_hosts=options.push_hosts,
            push_backlog=self.event_stores.for_session,
            metrics=metrics,
        )

        # The SDK gives every host but a push host the server's own instructions (host_greeting).
        self.push_instructions = instructions.push if instructions is not None else None
        self.server: Server[Any] = Server(
            SERVER_NAME,
            version=__version__,
            instructions=instructions.inbox if instructions is not None else None,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        self.server.middleware.append(self._track_session)
        for method in HOST_NOTIFICATION_METHODS:
            self.server.add_notification_handler(
                method, _AnyParams, partial(self._host_notification, method)
            )
        self.server.add_notification_handler(ACK_METHOD, _AnyParams, self._delivered)
        security = transport_security_settings(options.allowed_hosts, options.allowed_origins)
        self.manager = PerSessionEventStoreManager(
            self.server,
            event_stores=self.event_stores,
            security_settings=security,
            session_idle_timeout=options.session_idle_timeout_s,
        )

        # Only JWT auth makes outbound calls (the tenant's signing keys); a client built here is ours to close.
        self._owns_http = http_client is None and bool(options.auth.jwt_audiences)
        self._http = httpx.AsyncClient(timeout=JWKS_TIMEOUT_S) if self._owns_http else http_client
        self.endpoint = HostOriginGuard(self._authenticated_endpoint(), security)

    def _authenticated_endpoint(self) -> ASGIApp:
        """The layers of /mcp inside the Host/Origin guard (the module docstring's order)."""
        auth = self.options.auth
        endpoint: Any = StreamableHTTPASGIApp(self.manager)
        endpoint = PushStreamFromHistory(endpoint)
        endpoint = SessionTrafficObserver(endpoint, self.sessions)
        return BearerAuth(
            endpoint,
            verifier=build_verifier(auth, self._http),
            public_base_url=auth.public_base_url,
            required_scope=auth.policy.challenge_scope(),
        )

    def routes(self) -> list[BaseRoute]:
        """``/mcp`` (exactly: a mount would redirect to ``/mcp/``) and the OAuth resource metadata."""
        return [Route(MCP_PATH, self.endpoint), *protected_resource_routes(self.options.auth)]

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        """Run the session manager; enter it from the FastAPI app's lifespan (mounted apps get none)."""
        try:
            async with self.manager.run():
                yield
        finally:
            if self._owns_http and self._http is not None:
                await self._http.aclose()

    # --- SDK hooks ---

    async def _track_session(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        result = await call_next(ctx)
        if ctx.method == "initialize" and isinstance(result, dict):
            result = self._greeted(ctx, result)
            self._session_began(ctx, result)
        return result

    def _greeted(
        self, ctx: ServerRequestContext[Any, Any], result: dict[str, Any]
    ) -> dict[str, Any]:
        """A push host's initialize result declares the channel (host_greeting); any other is as built."""
        client = InitializeRequestParams.model_validate(ctx.params or {}, by_name=False).client_info
        if not is_push_host(client.name, self.options.push_hosts):
            return result
        # With the permission relay registered, a push host (the bridge) may forward Claude Code's asks.
        relays = self.tools.handles(PERMISSION_REQUEST_METHOD)
        return greet_push_host(
            result, instructions=self.push_instructions, relays_permissions=relays
        )

    def _session_began(self, ctx: ServerRequestContext[Any, Any], result: dict[str, Any]) -> None:
        session_id = session_id_of(ctx.session)
        if session_id is None:
            return
        # The handshake succeeded, so its params are valid; the SDK records them only after this hook.
        params = InitializeRequestParams.model_validate(ctx.params or {}, by_name=False)
        given = _header(ctx, HOST_ID_HEADER)
        # A push session acknowledges only when it named itself, within what its credential owns.
        host_id = self._host_of(ctx) if given is not None else None
        if given is not None and host_id is None:
            log.warning(
                "a host named itself with an id that is not one; its session does not acknowledge",
                extra={"length": len(given)},
            )
        self.sessions.opened(
            session_id,
            client_name=params.client_info.name,
            client_version=params.client_info.version,
            protocol_version=str(result.get("protocolVersion", params.protocol_version)),
            notifier=ctx.session,
            host_id=host_id,
        )
        call_when_session_ends(ctx.session, partial(self._session_ended, session_id))

    async def _session_ended(self, session_id: str) -> None:
        self.sessions.closed(session_id)
        self.event_stores.forget(session_id)

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        return ListToolsResult(tools=self.tools.definitions())

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams
    ) -> CallToolResult:
        call = self._call_of(ctx, time_budget_s=time_budget_of(params.meta))
        return await self.tools.call(params.name, params.arguments, call)

    async def _host_notification(
        self, method: str, ctx: ServerRequestContext[Any, Any], params: _AnyParams
    ) -> None:
        await self.tools.notified(method, params.model_dump(exclude={"meta"}), self._call_of(ctx))

    async def _delivered(self, ctx: ServerRequestContext[Any, Any], params: _AnyParams) -> None:
        """An acknowledging host has these messages (written to its own host)."""
        session_id = session_id_of(ctx.session)
        state = self.sessions.get(session_id) if session_id is not None else None
        if state is None or state.host_id is None or self.keeper is None:
            return  # not a host that acknowledges: nothing is owed to it
        try:
            delivered = DeliveredParams.model_validate(params.model_dump(exclude={"meta"}))
        except ValidationError:
            log.warning(
                "an acknowledgement that is not one was ignored", extra={"host_id": state.host_id}
            )
            return
        self.sessions.acknowledged(state.session_id)
        await self.keeper.acknowledge(state.host_id, delivered.keys)

    def _call_of(
        self, ctx: ServerRequestContext[Any, Any], *, time_budget_s: float | None = None
    ) -> ToolCall:
        session_id = session_id_of(ctx.session)
        request_id = getattr(ctx, "request_id", None)
        channel = caller = None
        if session_id is not None and request_id is not None:
            caller = CallerLine(
                partial(self.manager.response_stream_attached, session_id, request_id),
                grace_s=self.caller_grace_s,
            )
        if session_id is not None:
            # Any request's session object reaches the connection's standalone (GET) stream.
            channel = SessionChannel(
                send=ctx.session.send_notification,  # type: ignore[arg-type]
                is_open=partial(self.sessions.is_streaming, session_id),
            )
        state = self.sessions.get(session_id) if session_id is not None else None
        pushed_to = state.host_id if state is not None else None
        host_id = pushed_to or self._host_of(ctx)
        owe = None
        if pushed_to is not None and self.keeper is not None:
            owe = partial(self.keeper.owe, pushed_to)
        elif host_id is not None and self.inbox is not None and self.inbox.knows(host_id):
            # Only a host that reads its inbox: another's record would hold the reply until the sweep.
            owe = partial(self.inbox.owe, host_id)
        return ToolCall(
            session=state,
            hub=self.hub,
            request_id=request_id,
            channel=channel,
            time_budget_s=time_budget_s,
            caller=caller,
            owe=owe,
            host_id=host_id,
            host_about=_about(state, ctx),
        )

    def _host_of(self, ctx: ServerRequestContext[Any, Any]) -> str | None:
        """The host this request speaks for, from its credentials and its host-id header."""
        user = _scope(ctx).get("user")
        token = getattr(user, "access_token", None)
        return self.options.host_names.host_of(
            getattr(token, "client_id", None),
            getattr(token, "subject", None),
            _header(ctx, HOST_ID_HEADER),
        )


def _scope(ctx: ServerRequestContext[Any, Any]) -> dict[str, Any]:
    scope = getattr(ctx.request, "scope", None)
    return scope if isinstance(scope, dict) else {}


def _header(ctx: ServerRequestContext[Any, Any], name: str) -> str | None:
    headers = getattr(ctx.request, "headers", None)
    value = headers.get(name) if headers is not None else None
    return value if isinstance(value, str) else None


def _about(state: SessionState | None, ctx: ServerRequestContext[Any, Any]) -> dict[str, str]:
    """The client as it introduced itself: at initialize, or (no session) in the request's _meta."""
    if state is not None:
        return {
            "name": state.client_name,
            "version": state.client_version,
            "protocol": state.protocol_version,
        }
    return {"protocol": _header(ctx, "mcp-protocol-version") or ""}


# Host notifications the server routes to its tool registry (which may or may not handle them).
HOST_NOTIFICATION_METHODS = (PERMISSION_REQUEST_METHOD,)


class _AnyParams(NotificationParams):
    """A host notification's params as sent; the registered handler validates its own model."""

    model_config = ConfigDict(extra="allow")

"""The bridge's session with the fleet: tools forwarded, pushes received, the session kept alive.

One ``mcp`` client session at a time over streamable HTTP, on the handshake era (the only one with a
session push stream). When the replica holding it disappears (a 404 for the session id) the
connection initializes a new one, on whichever replica the ingress picks; when only the stream drops,
``sdk_adapter.ResumingStreamTransport`` resumes it with ``Last-Event-ID``. Every request carries the
affinity header, so an ingress hashing it keeps the host on one replica while that replica lives.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, cast

import anyio
import httpx2
from mcp.client import Client
from mcp.client.extension import ClientExtension, NotificationBinding
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INTERNAL_ERROR,
    CallToolResult,
    Implementation,
    JSONRPCNotification,
    RequestParamsMeta,
    TextContent,
    Tool,
)
from pydantic import BaseModel, ConfigDict

from service import __version__
from service.bridge.acknowledgements import PendingAcks
from service.bridge.auth import BearerAuth, TokenProvider
from service.bridge.config import AFFINITY_HEADER, BridgeConfig
from service.bridge.fleet_failures import SDK_STATUS_STANDIN, describe, status_reason
from service.bridge.fleet_health import FleetHealth
from service.bridge.sdk_adapter import (
    ResumingStreamTransport,
    resuming_http_client,
    send_client_notification,
)
from service.bridge.waits import first_of
from service.mcp.acknowledging import ACK_METHOD, HOST_ID_HEADER
from service.mcp.hosts import BRIDGE_PUSH_CLIENT_NAME
from service.mcp.sdk_adapter import PERMISSION_CAPABILITY
from service.mcp.tool_registry import TIME_BUDGET_META_KEY

log = logging.getLogger(__name__)

CHANNEL_METHOD = "notifications/claude/channel"
PERMISSION_VERDICT_METHOD = "notifications/claude/channel/permission"
# A fleet before the relay became a host notification offered it as this tool; the bridge never lists
# or calls it, so a model cannot ask a sponsor through any fleet.
LEGACY_PERMISSION_TOOL = "request_permission"

# The fleet decides from clientInfo.name whether a session is a push target (ENTRABOT_PUSH_HOSTS,
# whose default is this push name and nothing else). The bridge asks for pushes only when told the
# host loaded the channel (--push); otherwise the fleet keeps messages for the tools.
PUSH_CLIENT_NAME = BRIDGE_PUSH_CLIENT_NAME
TOOLS_CLIENT_NAME = "entrabot-channel-bridge"

_SESSION_HEADER = "mcp-session-id"
_SSE_READ_TIMEOUT_S = 300.0


class RawParams(BaseModel):
    """Notification params kept exactly as the fleet sent them, to be re-emitted unchanged."""

    model_config = ConfigDict(extra="allow")


@dataclass(frozen=True, slots=True)
class FleetNotification:
    method: str
    params: dict[str, Any]


class _Relay(ClientExtension):
    """The only way the SDK hands a client unknown notification methods (TOOLCHAIN: ClientExtension)."""

    identifier = "dev.entrabot/channel-bridge"

    def __init__(self, forward: Callable[[FleetNotification], Awaitable[None]]) -> None:
        self._forward = forward

    def notifications(self) -> list[NotificationBinding[Any]]:
        return [
            NotificationBinding(method=method, params_type=RawParams, handler=self._handler(method))
            for method in (CHANNEL_METHOD, PERMISSION_VERDICT_METHOD)
        ]

    def _handler(self, method: str) -> Callable[[RawParams], Awaitable[None]]:
        async def handle(params: RawParams) -> None:
            await self._forward(
                FleetNotification(method, params.model_dump(mode="json", by_alias=True))
            )

        return handle


class FleetListener(Protocol):
    """Who hears from the fleet: the host side (``HostServer``)."""

    async def offer(self, notification: FleetNotification) -> None: ...
    async def tools_changed(self) -> None: ...


class FleetConnection:
    """Holds one fleet session at a time until ``run``'s stop event is set.

    ``listener`` is set once the host side exists (it needs this connection to be built first).
    """

    def __init__(self, config: BridgeConfig, tokens: TokenProvider) -> None:
        self.config = config
        self._tokens = tokens
        self.listener: FleetListener | None = None
        self._client: Client | None = None
        self._connected = asyncio.Event()
        self._tools_known = asyncio.Event()
        self._session_gone: anyio.Event | None = None
        self.tools: list[Tool] = []
        self.relays_permissions = (
            False  # the fleet declared claude/channel/permission on the last session
        )
        self.sessions_opened = 0
        self.health = FleetHealth(config.fleet_url)
        self._acks = PendingAcks(self.notify, config.backoff)

    # --- what the host side uses ---

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    async def notify(self, method: str, params: dict[str, Any]) -> bool:
        """Send a notification on the current fleet session; whether it was handed to the transport."""
        try:
            await asyncio.wait_for(self._connected.wait(), self.config.call_wait_s)
        except TimeoutError:
            return False
        client = self._client
        if client is None:
            return False
        try:
            await send_client_notification(client, method, params)
        except Exception as exc:  # noqa: BLE001 - a lost notification is reported, the host goes on
            self.health.note(f"notification failed ({type(exc).__name__})")
            return False
        return True

    def acknowledge(self, key: tuple[str, str]) -> None:
        """The host has this message (written to its stdin): tell the fleet, batched, on whichever session
        is open; kept until one is, since an unacknowledged message is pushed again."""
        if self.config.acknowledge:
            self._acks.add(key)

    async def wait_for_tools(self, timeout_s: float) -> bool:
        """Whether the fleet's tool list is known, waiting up to ``timeout_s`` for the first attempt at
        a session to settle (a refused or unreachable fleet answers at once)."""
        await self.health.settled(timeout_s)
        return self._tools_known.is_set()

    def unavailable(self, consequence: str) -> str:
        """Why nothing can reach the fleet now (its last failure, or that it has not answered yet), and
        ``consequence`` for what was asked."""
        reason = self.health.last_error or (
            f"the fleet at {self.config.fleet_url} has not answered yet"
        )
        return f"{reason} (the bridge keeps retrying; {consequence})"

    async def call_tool(self, name: str, arguments: dict[str, Any] | None) -> CallToolResult:
        """The fleet's result unchanged; a fleet error or an unreachable fleet becomes a tool error
        naming the cause."""
        await self.health.settled(self.config.call_wait_s)
        client = self._client
        if client is None:
            return tool_error(self.unavailable("the call was not sent"))
        started = time.monotonic()
        try:
            # The fleet's tools that wait (a sponsor wait after a send) end within this, so a posted
            # message is never reported as a timed-out call.
            # RequestParamsMeta is an open map (extra_items=Any), which mypy's TypedDict cannot spell yet.
            meta = cast(RequestParamsMeta, {TIME_BUDGET_META_KEY: self.config.request_timeout_s})
            return await client.call_tool(name, arguments, meta=meta)
        except MCPError as exc:
            message = exc.error.message
            if exc.error.code == INTERNAL_ERROR and message == SDK_STATUS_STANDIN:
                refusal = self.health.refusal_since(started)
                if refusal is not None:
                    # A 5xx may come after the replica began the call; a 401 or 403 before it.
                    status, reason = refusal
                    ran = "may or may not have run" if status >= 500 else "was not run"
                    message = f"{reason}; the call {ran}"
            return tool_error(message)
        except Exception as exc:  # noqa: BLE001 - any transport failure is an answer the host can read
            self.health.note(f"tools/call failed ({type(exc).__name__})")
            return tool_error(f"the fleet did not answer ({type(exc).__name__}); retrying")

    # --- the session loop ---

    async def run(self, stop: asyncio.Event) -> None:
        acks = asyncio.create_task(self._acks.send(stop))
        try:
            await self._run_sessions(stop)
        finally:
            acks.cancel()

    async def _run_sessions(self, stop: asyncio.Event) -> None:
        failures = 0
        async with self._http() as http:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    opened = await self._hold_session(http, stop)
                except Exception as exc:  # noqa: BLE001 - every failure to hold a session means "retry"
                    self.health.attempt_failed(exc, started)
                    opened = False
                if stop.is_set():
                    break
                failures = 0 if opened else failures + 1
                delay = self.config.backoff.delay(max(failures, 1))
                try:
                    await asyncio.wait_for(stop.wait(), delay)
                except TimeoutError:
                    pass

    async def _hold_session(self, http: httpx2.AsyncClient, stop: asyncio.Event) -> bool:
        """Initialize, list the tools, then keep the session until it is gone or ``stop`` is set.

        Returns whether a session was opened (a fresh one after a lost session is retried at once).
        """
        gone = self._session_gone = anyio.Event()
        transport = ResumingStreamTransport(
            self.config.fleet_url,
            backoff=self.config.backoff,
            session_gone=gone,
            on_stream_open=self._stream_opened,
            on_stream_error=self.health.note,
            on_notification_lost=self._notification_lost,
        )
        client = Client(
            resuming_http_client(transport, http),
            mode="legacy",
            extensions=[_Relay(self._notified)],
            client_info=Implementation(
                name=PUSH_CLIENT_NAME if self.config.push else TOOLS_CLIENT_NAME,
                version=__version__,
            ),
            read_timeout_seconds=self.config.request_timeout_s,
            cache=None,
        )
        async with client:
            self.relays_permissions = PERMISSION_CAPABILITY in (
                client.server_capabilities.experimental or {}
            )
            await self._set_tools(await _all_tools(client))
            self._client = client
            self.sessions_opened += 1
            self._tools_known.set()
            self._connected.set()
            self.health.opened()
            log.info(
                "fleet session opened",
                extra={
                    "tools": len(self.tools),
                    "sessions_opened": self.sessions_opened,
                    "push": self.config.push,
                },
            )
            try:
                await self._keep(client, gone, stop)
            finally:
                self._connected.clear()
                self._client = None
                self.health.closed()
        if gone.is_set():
            log.warning(
                "fleet session gone; initializing a new one",
                extra={"reason": "the fleet answered 404"},
            )
        return True

    async def _keep(self, client: Client, gone: anyio.Event, stop: asyncio.Event) -> None:
        """Wait for the end of the session, refreshing the tool list now and then.

        The refresh also reports a replica that stopped answering while no push comes; the session
        itself ends only on a 404 (the transport's stream retries, or any request, see one) or on stop.
        """
        while not stop.is_set() and not gone.is_set():
            with anyio.move_on_after(self.config.keepalive_s):
                await first_of(stop.wait, gone.wait)
            if stop.is_set() or gone.is_set():
                return
            # A hung replica must not hold the bridge's exit (stop) or a re-initialization (gone).
            await first_of(partial(self._refresh_tools, client), stop.wait, gone.wait)

    async def _refresh_tools(self, client: Client) -> None:
        started = time.monotonic()
        try:
            await self._set_tools(await _all_tools(client))
        except MCPError as exc:
            if self.health.refusal_since(started) is None:  # else the response hook said why
                self.health.note(f"tools/list refused: {exc.error.message}")
        except Exception as exc:  # noqa: BLE001 - the stream's own retries decide; this only reports
            self.health.note(describe(exc, self.config.fleet_url))

    async def _set_tools(self, tools: list[Tool]) -> None:
        """Keep the fleet's list; tell the host when it changed (a new replica version, a first session)."""
        tools = [tool for tool in tools if tool.name != LEGACY_PERMISSION_TOOL]
        changed = [t.model_dump() for t in tools] != [t.model_dump() for t in self.tools]
        self.tools = tools
        if changed and self.listener is not None:
            await self.listener.tools_changed()

    async def _notified(self, notification: FleetNotification) -> None:
        if self.listener is not None:
            await self.listener.offer(notification)

    # --- plumbing ---

    def _http(self) -> httpx2.AsyncClient:
        # A push bridge names its host, so the fleet owes it what it claims for it until it acknowledges.
        config = self.config
        named = (
            {HOST_ID_HEADER: config.host_id}
            if config.push and config.acknowledge and config.host_id
            else {}
        )
        return httpx2.AsyncClient(
            auth=BearerAuth(self._tokens),
            headers={AFFINITY_HEADER: self.config.affinity_key, **named},
            timeout=httpx2.Timeout(self.config.request_timeout_s, read=_SSE_READ_TIMEOUT_S),
            event_hooks={"response": [self._watch_response]},
        )

    async def _watch_response(self, response: httpx2.Response) -> None:
        status = response.status_code
        if status < 400:
            return
        if (
            status == 404
            and _SESSION_HEADER in response.request.headers
            and self._session_gone is not None
        ):
            self._session_gone.set()  # the replica no longer knows this session: initialize anew
            return
        self.health.refused(
            status,
            status_reason(
                status,
                self.config.fleet_url,
                self.config.credential,
                response.headers.get("www-authenticate", ""),
            ),
        )

    def _notification_lost(self, notification: JSONRPCNotification, reason: str) -> None:
        """A notification's POST failed on the wire. An acknowledgement's keys go back in the batch (the
        fleet takes a repeat as one); anything else is reported, and the host goes on."""
        self.health.note(reason)
        if notification.method == ACK_METHOD and self.config.acknowledge:
            self._acks.requeue(notification)

    def _stream_opened(self, resumed: bool) -> None:
        log.info("push stream open", extra={"resumed": resumed})


async def _all_tools(client: Client) -> list[Tool]:
    tools: list[Tool] = []
    cursor: str | None = None
    for _ in range(100):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


def tool_error(message: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)

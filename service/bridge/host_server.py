"""The bridge's face to the host: a stdio MCP server declaring ``claude/channel`` and the fleet's tools.

What Claude Code does with it (its channels reference, "Server options" and "Notification format";
read, not run here): it registers a listener for ``notifications/claude/channel`` when the server
declares ``capabilities.experimental['claude/channel']``; it renders each event as a ``<channel>``
tag with the meta keys as attributes; it does not acknowledge events; and when the session did not
load the channel (``--channels`` / ``--dangerously-load-development-channels server:<name>``) the
events are dropped silently. Claude Code sends nothing in its initialize that says whether the
channel was loaded, so the bridge cannot find out: whether it asks the fleet for pushes is the
operator's ``--push`` flag, paired in the README with the channels flag.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import anyio
from mcp.server import NotificationOptions
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.runner import serve_loop
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INTERNAL_ERROR,
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    NotificationParams,
    PaginatedRequestParams,
)
from pydantic import BaseModel, ConfigDict

from service import __version__
from service.mcp.instructions import FLEET_INSTRUCTIONS
from service.bridge.dedupe import DedupeWindow
from service.bridge.written_log import WrittenLog
from service.bridge.era_guard import Inbound, guard_handshake_era
from service.bridge.fleet_connection import (
    CHANNEL_METHOD,
    LEGACY_PERMISSION_TOOL,
    PERMISSION_VERDICT_METHOD,
    FleetConnection,
    FleetNotification,
    tool_error,
)
from service.mcp.sdk_adapter import PERMISSION_CAPABILITY, PERMISSION_REQUEST_METHOD, ChannelServer

log = logging.getLogger(__name__)

SERVER_NAME = "entrabot-fleet-channel"
OUTBOX_LIMIT = 10_000  # pushes held while the host has not finished its handshake
INSTRUCTIONS = FLEET_INSTRUCTIONS


class PermissionRequest(BaseModel):
    """Claude Code's ``permission_request`` params (channels reference, "Relay permission prompts")."""

    model_config = ConfigDict(extra="allow")
    request_id: str
    tool_name: str
    description: str
    input_preview: str


class _Outbound(BaseModel):
    # The SDK sends any model with ``method`` and ``params`` as a notification.
    method: str
    params: dict[str, Any]


class HostServer:
    """Serves one host over a stream pair; ``offer`` queues fleet notifications for it."""

    def __init__(
        self,
        fleet: FleetConnection,
        *,
        permission_relay: bool,
        dedupe_window: int,
        tools_wait_s: float = 10.0,
        written: WrittenLog | None = None,
    ) -> None:
        self._fleet = fleet
        self._permission_relay = permission_relay
        self._tools_wait_s = tools_wait_s
        # Messages written to the host, this run and earlier ones (the state file); verdicts are this run's.
        self._written = written if written is not None else WrittenLog(None, dedupe_window)
        self._seen_messages = self._written.window
        self._seen_verdicts = DedupeWindow(dedupe_window)
        self._outbox: asyncio.Queue[FleetNotification] = asyncio.Queue(OUTBOX_LIMIT)
        self._host: ServerSession | None = None
        self._host_ready = asyncio.Event()
        self.emitted = 0
        self.duplicates_dropped = 0
        self._relaying: set[asyncio.Task[None]] = set()
        # The same server class as /mcp: it declares claude/channel in every capabilities answer.
        self.server = ChannelServer(
            SERVER_NAME,
            version=__version__,
            instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        self.server.middleware.append(self._on_initialize)
        self.server.add_notification_handler(
            "notifications/initialized", NotificationParams, self._initialized
        )
        self.server.add_notification_handler(
            PERMISSION_REQUEST_METHOD, PermissionRequest, self._permission_request
        )

    def relays_permissions(self) -> bool:
        # Declared only when asked for and the fleet can take the request: the fleet authenticates the
        # sponsor who answers, which is what makes relaying a permission prompt acceptable at all.
        return self._permission_relay and self._fleet.relays_permissions

    # --- fleet -> host ---

    async def offer(self, notification: FleetNotification) -> None:
        """Queue a fleet notification for the host, unless it was already emitted."""
        key = _dedupe_key(notification)
        if key is not None:
            window = (
                self._seen_verdicts
                if notification.method == PERMISSION_VERDICT_METHOD
                else self._seen_messages
            )
            if not window.first_sight(key):
                self.duplicates_dropped += 1
                log.info("duplicate push dropped", extra={"message_id": key[-1]})
                if notification.method == CHANNEL_METHOD and self._written.has_written(key):
                    # A repeat means the fleet did not hear the first acknowledgement (or was told before
                    # a replica died): the host has it, so say so again.
                    self._fleet.acknowledge((key[0], key[1]))
                return
        try:
            self._outbox.put_nowait(notification)
        except asyncio.QueueFull:
            log.error(
                "host not reading: push dropped", extra={"message_id": key[-1] if key else None}
            )

    async def tools_changed(self) -> None:
        """Tell the host to list the tools again; before its handshake ends it has not listed them yet."""
        if self._host is not None and self._host_ready.is_set():
            await self._host.send_tool_list_changed()

    async def _emit(self) -> None:
        await self._host_ready.wait()
        while True:
            notification = await self._outbox.get()
            assert self._host is not None
            await self._host.send_notification(
                _Outbound(method=notification.method, params=notification.params)  # type: ignore[arg-type]
            )
            self.emitted += 1
            key = _dedupe_key(notification)
            if key is not None and notification.method == CHANNEL_METHOD:
                self._written.written(
                    key
                )  # after the write: a crash between the two repeats, never loses
                self._fleet.acknowledge(
                    (key[0], key[1])
                )  # after the write too: the fleet may forget it now

    # --- host -> bridge ---

    async def serve(self, host_in: Any, host_out: Any) -> None:
        """Serve until the host closes its side (stdin EOF)."""
        to_server, from_guard = anyio.create_memory_object_stream[Inbound](0)
        async with anyio.create_task_group() as group:
            group.start_soon(guard_handshake_era, host_in, to_server, host_out)
            group.start_soon(self._emit)
            options = self.server.create_initialization_options(
                NotificationOptions(tools_changed=True)
            )
            await serve_loop(
                self.server, from_guard, host_out, lifespan_state={}, init_options=options
            )
            group.cancel_scope.cancel()

    async def _on_initialize(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if ctx.method == "initialize":
            self._host = ctx.session
            if self._permission_relay:
                # The capability answer depends on the fleet's tool list: wait (bounded) for it.
                await self._fleet.wait_for_tools(self._tools_wait_s)
        result = await call_next(ctx)
        if ctx.method == "initialize" and isinstance(result, dict) and self.relays_permissions():
            # Decided per handshake, not when the server was built: the runner's initialization options
            # are fixed before the fleet's tool list is known.
            capabilities = result.setdefault("capabilities", {})
            capabilities.setdefault("experimental", {})[PERMISSION_CAPABILITY] = {}
        return result

    async def _initialized(
        self, ctx: ServerRequestContext[Any, Any], params: NotificationParams
    ) -> None:
        log.info("host ready", extra={"permission_relay": self.relays_permissions()})
        self._host_ready.set()

    async def _permission_request(
        self, ctx: ServerRequestContext[Any, Any], params: PermissionRequest
    ) -> None:
        if not self.relays_permissions():
            return  # not declared, so not expected; nothing to relay it to
        arguments = {
            "request_id": params.request_id,
            "tool_name": params.tool_name,
            "description": params.description,
            "input_preview": params.input_preview,
        }
        # Not awaited here: the host's next messages must not wait behind a call to the fleet.
        task = asyncio.create_task(self._relay_permission(arguments))
        self._relaying.add(task)
        task.add_done_callback(self._relaying.discard)

    async def _relay_permission(self, arguments: dict[str, str]) -> None:
        # The same notification Claude Code sent, on the bridge's own fleet session: the one path to a
        # sponsor, and one no tool call can take.
        if not await self._fleet.notify(PERMISSION_REQUEST_METHOD, arguments):
            log.warning(
                "permission request not relayed", extra={"request_id": arguments["request_id"]}
            )

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        if (
            not await self._fleet.wait_for_tools(self._tools_wait_s)
            and self._fleet.health.last_error
        ):
            # No tool to call means no tool result to carry the cause, so the list itself fails with it.
            # Claude Code 2.1.332 (read in its binary, not a documented contract) catches a failed
            # tools/list: it logs "Failed to fetch tools: <message>", shows the message as the
            # server's "Issue" in /mcp, keeps the server with no tools, and lists them again on the
            # tools/list_changed the bridge sends once a session opens.
            raise MCPError(
                INTERNAL_ERROR, self._fleet.unavailable("the tools appear once a session opens")
            )
        return ListToolsResult(tools=list(self._fleet.tools))

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams
    ) -> CallToolResult:
        if params.name == LEGACY_PERMISSION_TOOL:
            return tool_error(
                "request_permission is not a tool: only Claude Code's own permission prompts "
                "reach the sponsor"
            )
        return await self._fleet.call_tool(params.name, params.arguments)


def _dedupe_key(notification: FleetNotification) -> tuple[str, ...] | None:
    params = notification.params
    if notification.method == PERMISSION_VERDICT_METHOD:
        request_id = params.get("request_id")
        return ("verdict", str(request_id)) if request_id else None
    if notification.method == CHANNEL_METHOD:
        meta = params.get("meta")
        if isinstance(meta, dict) and meta.get("message_id"):
            return (str(meta.get("chat_id", "")), str(meta["message_id"]))
    return None

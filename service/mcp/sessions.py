"""The live MCP sessions of this replica, and which of them hold an open push stream.

The registry is fed from two sides: the server's initialize hook (a session begins, with the host's
``clientInfo``) and its end hook (DELETE, idle expiry, crash, shutdown); and ``SessionTrafficObserver``,
which watches every HTTP request on ``/mcp`` (activity, and GET streams opening and closing). A
push-capable session is a live delivery target in the hub while its GET stream is open and its host
keeps reading it (``PushTarget.is_alive``).
"""

from __future__ import annotations

import dataclasses
import logging
from enum import Enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

from mcp.server.session import ServerSession
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.mcp.hosts import is_push_host
from service.mcp.push_target import PushBacklog, PushDelivery, PushTarget
from service.telemetry.metrics import McpMetrics

log = logging.getLogger(__name__)

_SESSION_HEADER = MCP_SESSION_ID_HEADER.encode("ascii")


def _utcnow() -> datetime:
    return datetime.now(UTC)


class HostKind(str, Enum):
    """How a connected host takes messages: pushed on its open stream, or through the tools."""

    PUSH = "push"
    TOOLS = "tools"


@dataclass(frozen=True, slots=True)
class SessionState:
    """What this replica knows about one MCP session (a snapshot; the registry holds the current one)."""

    session_id: str
    client_name: str
    client_version: str
    protocol_version: str
    push_capable: bool
    created_at: datetime
    last_activity_at: datetime
    open_streams: int = (
        0  # GET streams; the SDK allows one, a reconnect may overlap its predecessor briefly
    )
    host_id: str | None = None  # an acknowledging host's own name (service.mcp.acknowledging)
    stream_closed_at: datetime | None = None  # when its last GET stream closed
    last_ack_at: datetime | None = None  # its newest acknowledgement (an acknowledging host)

    @property
    def push_stream_open(self) -> bool:
        return self.open_streams > 0

    @property
    def away(self) -> bool:
        """Gone, as far as this replica can tell, though the SDK keeps the session until its idle
        timeout (30 min by default) so a host back from a network blip resumes it: its GET stream
        closed and no request came since. A killed host's kernel closes its connections at once,
        so this is the moment it died; a host that only dropped its stream is back at its next
        request."""
        return (
            self.open_streams == 0
            and self.stream_closed_at is not None
            and self.last_activity_at <= self.stream_closed_at
        )

    @property
    def kind(self) -> HostKind | None:
        """How the host takes messages now, or None while it is away."""
        if self.away:
            return None
        return HostKind.PUSH if self.push_capable and self.push_stream_open else HostKind.TOOLS


class SessionRegistry:
    """Session id -> ``SessionState``, and the push targets registered in the hub for them.

    ``push_backlog`` gives a session's push history (its ``SessionEventStore``), which tells its push
    target whether the host is still reading.
    """

    def __init__(
        self,
        pushes: PushDelivery,
        *,
        push_hosts: Sequence[str],
        push_backlog: Callable[[str], PushBacklog],
        metrics: McpMetrics,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        self._pushes = pushes
        self._hub = pushes.hub
        self._keeper = pushes.keeper
        self._push_hosts = tuple(push_hosts)
        self._push_backlog = push_backlog
        self._metrics = metrics
        self._clock = clock
        self._sessions: dict[str, SessionState] = {}
        self._notifiers: dict[str, ServerSession] = {}
        self._targets: dict[str, PushTarget] = {}
        # Read at each scrape, so the count falls the moment a host's stream closes.
        for kind in HostKind:
            metrics.hosts.labels(kind=kind.value).set_function(partial(self.count, kind))

    # --- reading ---

    def count(self, kind: HostKind) -> int:
        return sum(1 for s in self._sessions.values() if s.kind is kind)

    def get(self, session_id: str) -> SessionState | None:
        return self._sessions.get(session_id)

    def sessions(self) -> list[SessionState]:
        return list(self._sessions.values())

    def is_streaming(self, session_id: str) -> bool:
        state = self._sessions.get(session_id)
        return state is not None and state.push_stream_open

    # --- lifecycle (from the server's initialize and end hooks) ---

    def opened(
        self,
        session_id: str,
        *,
        client_name: str,
        client_version: str,
        protocol_version: str,
        notifier: ServerSession,
        host_id: str | None = None,
    ) -> SessionState:
        now = self._clock()
        push_capable = is_push_host(client_name, self._push_hosts)
        state = SessionState(
            session_id=session_id,
            client_name=client_name,
            client_version=client_version,
            protocol_version=protocol_version,
            push_capable=push_capable,
            created_at=now,
            last_activity_at=now,
            # Only a push host acknowledges, and only a replica keeping hosts' records can hold it to that.
            host_id=host_id if push_capable and self._keeper is not None else None,
        )
        self._sessions[session_id] = state
        self._notifiers[session_id] = notifier
        self._publish()
        log.info(
            "mcp session opened",
            extra={
                "client_name": client_name[:64],
                "client_version": client_version[:32],
                "protocol_version": protocol_version,
                "push_capable": state.push_capable,
                "acknowledging": state.host_id is not None,
            },
        )
        return state

    def closed(self, session_id: str) -> None:
        state = self._sessions.pop(session_id, None)
        self._notifiers.pop(session_id, None)
        self._drop_target(session_id)
        if state is not None and state.host_id is not None and self._keeper is not None:
            self._keeper.session_ended(state.host_id, session_id)
        if state is not None:
            self._publish()
            log.info("mcp session closed", extra={"client_name": state.client_name[:64]})

    # --- traffic (from SessionTrafficObserver) ---

    def touch(self, session_id: str) -> None:
        state = self._sessions.get(session_id)
        if state is not None:
            self._sessions[session_id] = dataclasses.replace(state, last_activity_at=self._clock())

    def acknowledged(self, session_id: str) -> None:
        state = self._sessions.get(session_id)
        if state is not None:
            self._sessions[session_id] = dataclasses.replace(state, last_ack_at=self._clock())

    def stream_opened(self, session_id: str) -> None:
        state = self._sessions.get(session_id)
        if state is None:
            return  # the SDK answered 200 for a session we never saw begin; nothing to push into
        self._sessions[session_id] = dataclasses.replace(
            state, open_streams=state.open_streams + 1, last_activity_at=self._clock()
        )
        if state.push_capable and session_id not in self._targets:
            host_id, keeper = state.host_id, self._keeper
            owed: dict[str, Any] = (
                {}
                if host_id is None or keeper is None
                else {
                    "host_id": host_id,
                    "has_room": partial(keeper.has_room, host_id),
                    "on_pushed": partial(keeper.pushed, host_id, session_id),
                }
            )
            target = PushTarget(
                session_id=session_id,
                notifier=self._notifiers[session_id],
                stream_open=lambda: self.is_streaming(session_id),
                backlog=self._push_backlog(session_id),
                render=self._pushes.render,
                metrics=self._pushes.metrics,
                send_timeout_s=self._pushes.send_timeout_s,
                clock=self._clock,
                **owed,
            )
            self._targets[session_id] = target
            self._hub.register(target)
            if host_id is not None and keeper is not None:
                keeper.stream_opened(host_id, session_id)

    def stream_closed(self, session_id: str) -> None:
        state = self._sessions.get(session_id)
        if state is None:
            return
        left = max(state.open_streams - 1, 0)
        now = self._clock()
        self._sessions[session_id] = dataclasses.replace(
            state, open_streams=left, last_activity_at=now, stream_closed_at=now
        )
        if not left:
            self._drop_target(session_id)

    def _drop_target(self, session_id: str) -> None:
        target = self._targets.pop(session_id, None)
        if target is not None:
            self._hub.unregister(target.target_id)

    def _publish(self) -> None:
        # The push-stream gauge is published by the hub, which counts these same targets.
        self._metrics.sessions.set(len(self._sessions))


class SessionTrafficObserver:
    """ASGI wrapper around the SDK's /mcp app that reports session traffic to the registry.

    A GET answered 200 for a session is its push stream; the stream is open until the SDK's handler
    returns, which happens when either side closes it, or a newer connection of the session takes the
    stream over. It is reported open when its headers go out, a moment before the event store starts
    serving it; a push sent in that moment is in the session's history after the connection's
    starting position, so this connection sends it (``event_store``).
    """

    def __init__(self, app: ASGIApp, registry: SessionRegistry) -> None:
        self.app = app
        self.registry = registry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        session_id = _session_id(scope) if scope["type"] == "http" else None
        if session_id is None:
            await self.app(scope, receive, send)
            return
        self.registry.touch(session_id)
        if scope["method"] != "GET":
            await self.app(scope, receive, send)
            return

        opened = False

        async def watch(message: Message) -> None:
            nonlocal opened
            if message["type"] == "http.response.start" and message["status"] == 200 and not opened:
                opened = True
                self.registry.stream_opened(session_id)
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            if opened:
                self.registry.stream_closed(session_id)


def _session_id(scope: Scope) -> str | None:
    value = next((v for k, v in scope["headers"] if k == _SESSION_HEADER), None)
    return value.decode("latin-1") if value is not None else None

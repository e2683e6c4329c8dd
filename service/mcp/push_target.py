"""A push-capable MCP session as a delivery target of the hub: claimed messages go out on its GET stream.

What "taken" means here. ``ServerSession.send_notification`` hands the push to the session's
transport (its ``message_router``) through a zero-buffer anyio stream, and the router stores it in
the session's event history at once; this replica serves the session's push stream from that history
alone (``event_store``), so once the send returns the session's stream has the push, and sends it on
the open connection or on the next one that resumes. A send the timeout cuts short is another matter:
anyio's zero-buffer send completes a hand-over in the receiving task, and the sender can be cancelled
in the same turn and raise all the same (``MemoryObjectSendStream.send``). Whether the session has
the push is then unknown, and the answer is ``Handover.IN_DOUBT``: the hub offers it to no other host.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import anyio
from pydantic import BaseModel

from service.delivery.host_keeper import HostKeeper
from service.delivery.hub import DeliveryHub, Handover, TargetKind
from service.domain.message import InboundMessage
from service.delivery.push import build_channel_push
from service.telemetry.logging import session_ref
from service.telemetry.metrics import DeliveryMetrics

log = logging.getLogger(__name__)

DEFAULT_SEND_TIMEOUT_S = 10.0
# A session that did not take a push within the send timeout is set aside this long: the hub then
# neither waits on it again for every message (each wait holds up a chat-poll cycle) nor lets the
# replica claim for it; another replica's host takes the messages meanwhile. After it, one more push is tried.
STALLED_FOR_S = 60.0


class Notifier(Protocol):
    """The session a push is sent through (``ServerSession``)."""

    async def send_notification(self, notification: Any) -> None: ...


class PushBacklog(Protocol):
    """The pushes a session's stream holds that no connection has taken yet (``SessionEventStore``)."""

    def backlog_full(self) -> bool: ...

    def backlog_age_s(self) -> float | None: ...


@dataclass(frozen=True)
class NothingQueued:
    """The backlog of a notifier that keeps none."""

    def backlog_full(self) -> bool:
        return False

    def backlog_age_s(self) -> float | None:
        return None


@dataclass(frozen=True)
class PushDelivery:
    """What the push targets of a server's sessions deliver for: the hub they are targets in, how a
    claimed message becomes a push, and how long a session may take to take one."""

    hub: DeliveryHub
    metrics: DeliveryMetrics  # the latency of each push a session took
    render: Callable[[InboundMessage], BaseModel] = build_channel_push
    send_timeout_s: float = DEFAULT_SEND_TIMEOUT_S
    # The replica's records of acknowledging hosts (service.delivery.host_keeper); without it no
    # session acknowledges, and nothing is owed to a host.
    keeper: HostKeeper | None = None


@dataclass(eq=False)
class PushTarget:
    """Sends ``notifications/claude/channel`` into one session's standalone (GET) stream.

    Alive while that stream is open and its host keeps taking what it was given: the SDK drops a
    notification for a session without a stream silently, so liveness comes from the session
    registry, which watches the stream itself; and a host whose oldest untaken push has waited past
    the send timeout, or whose backlog is full, has stopped reading and takes nothing more until it
    catches up (what it holds reaches it then, in order).
    """

    session_id: str
    notifier: Notifier  # any request's session object reaches the connection's standalone stream
    stream_open: Callable[[], bool]
    metrics: DeliveryMetrics
    backlog: PushBacklog = NothingQueued()
    render: Callable[[InboundMessage], BaseModel] = build_channel_push
    send_timeout_s: float = DEFAULT_SEND_TIMEOUT_S
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    monotonic: Callable[[], float] = time.monotonic
    stalled_for_s: float = STALLED_FOR_S
    # An acknowledging host (a bridge that named itself): what the hub claims for it is owed to it until
    # it acknowledges (service.delivery.host_keeper); ``has_room`` says whether its record takes more.
    host_id: str | None = None
    has_room: Callable[[], bool] = lambda: True
    on_pushed: Callable[[InboundMessage], None] | None = None
    _stalled_until: float = float("-inf")

    @property
    def target_id(self) -> str:
        return f"push:{self.session_id}"

    @property
    def kind(self) -> TargetKind:
        return TargetKind.PUSH

    def is_alive(self) -> bool:
        return self.is_reading() and self.has_room()

    def is_reading(self) -> bool:
        if (
            not self.stream_open()
            or self.monotonic() < self._stalled_until
            or self.backlog.backlog_full()
        ):
            return False
        waited = self.backlog.backlog_age_s()
        return waited is None or waited < self.send_timeout_s

    def accepts(self, message: InboundMessage) -> bool:
        return True  # a push host takes chat and mail alike

    def room_for(self, message: InboundMessage, alongside: Sequence[InboundMessage]) -> bool:
        return True  # unbounded: every push is a notification of its own (the hub does not ask)

    def allotted(self, taken: Sequence[InboundMessage], left: Sequence[InboundMessage]) -> None:
        """Never told: a push session is not allotted (TargetKind.PUSH is unbounded)."""

    async def deliver(self, message: InboundMessage) -> Handover:
        # Checked before sending, never after: once the session has taken the push it is in the
        # session's history and goes out on its stream, so no other target may have it. (Room is the
        # hub's question before a claim; what is owed already is pushed whatever the record holds.)
        if not self.is_reading():
            return Handover.NOT_TAKEN
        push = self.render(message)
        # The session takes one message at a time; a session that does not take it must not hold up
        # the hub for longer than the timeout.
        with anyio.move_on_after(self.send_timeout_s) as scope:
            await self.notifier.send_notification(push)
        if scope.cancelled_caught:
            self._stalled_until = self.monotonic() + self.stalled_for_s
            log.warning(
                "push stream did not take the message in time; it may still reach this host, so no other "
                "host is offered it, and this one is set aside",
                extra={
                    "session": session_ref(self.session_id),
                    "message_id": message.message_id,
                    "seconds": self.stalled_for_s,
                },
            )
            if self.on_pushed is not None:
                self.on_pushed(
                    message
                )  # it may have it: pushed again after the bound, never to another host
            return Handover.IN_DOUBT
        if self.on_pushed is not None:
            self.on_pushed(message)
        lag = (self.clock() - message.created).total_seconds()
        self.metrics.delivery_latency.labels(message.source.value).observe(max(lag, 0.0))
        return Handover.TAKEN

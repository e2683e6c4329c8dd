"""A push-capable MCP session as a delivery target of the hub: claimed messages go out on its GET stream."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import anyio
from mcp.server.session import ServerSession
from pydantic import BaseModel

from service.delivery.hub import TargetKind
from service.delivery.message import InboundMessage
from service.delivery.push import build_channel_push
from service.telemetry.logging import session_ref
from service.telemetry.metrics import Metrics

log = logging.getLogger(__name__)

DEFAULT_SEND_TIMEOUT_S = 10.0
# A host that did not take a push within the send timeout is set aside this long: the hub then neither
# waits on it again for every message (each wait holds up a chat-poll cycle) nor lets the replica claim
# for it; another replica's host takes the messages meanwhile. After it, one more push is tried.
STALLED_FOR_S = 60.0


@dataclass(eq=False)
class PushTarget:
    """Sends ``notifications/claude/channel`` into one session's standalone (GET) stream.

    Alive exactly while that stream is open: the SDK drops a notification for a session without a
    stream silently, so liveness comes from the session registry, which watches the stream itself.
    """

    session_id: str
    notifier: ServerSession  # any request's session object reaches the connection's standalone stream
    stream_open: Callable[[], bool]
    render: Callable[[InboundMessage], BaseModel] = build_channel_push
    metrics: Metrics | None = None
    send_timeout_s: float = DEFAULT_SEND_TIMEOUT_S
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    monotonic: Callable[[], float] = time.monotonic
    stalled_for_s: float = STALLED_FOR_S
    _stalled_until: float = float("-inf")

    @property
    def target_id(self) -> str:
        return f"push:{self.session_id}"

    @property
    def kind(self) -> TargetKind:
        return TargetKind.PUSH

    def is_alive(self) -> bool:
        return self.stream_open() and self.monotonic() >= self._stalled_until

    def accepts(self, message: InboundMessage) -> bool:
        return True  # a push host takes chat and mail alike

    def room_for(self, message: InboundMessage, alongside: Sequence[InboundMessage]) -> bool:
        return True  # unbounded: every push is a notification of its own (the hub does not ask)

    def allotted(self, taken: Sequence[InboundMessage], left: Sequence[InboundMessage]) -> None:
        """Never told: a push session is not allotted (TargetKind.PUSH is unbounded)."""

    async def deliver(self, message: InboundMessage) -> bool:
        # Checked before sending, never after: once the session has taken the push it is in the
        # session's event history, and a host that reconnects gets it replayed. Reporting failure
        # then would let the hub hand it to a second target as well.
        if not self.is_alive():
            return False
        push = self.render(message)
        # The session takes one message at a time; a host that stopped reading must not hold up the
        # hub. A send cut short by the timeout was never taken, so another target may have it.
        with anyio.move_on_after(self.send_timeout_s) as scope:
            # Any pydantic model with `method` and `params` goes out as is.
            await self.notifier.send_notification(push)  # type: ignore[arg-type]
        if scope.cancelled_caught:
            self._stalled_until = self.monotonic() + self.stalled_for_s
            log.warning(
                "push stream did not take the message in time; host set aside",
                extra={"session": session_ref(self.session_id), "message_id": message.message_id,
                       "seconds": self.stalled_for_s},
            )
            return False
        if self.metrics is not None:
            lag = (self.clock() - message.created).total_seconds()
            self.metrics.delivery_latency.labels(message.source.value).observe(max(lag, 0.0))
        return True

"""DeliveryHub: the live delivery targets one replica holds, and the hand-off of claimed messages.

The delivery rule (SPEC §1) lives here: a worker asks the hub which of its candidates some live target
could take *before* claiming, and claims only those. A replica whose hub is empty claims nothing, so
the messages stay in Graph for a replica that has a host.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from opentelemetry import trace

from service.delivery.message import InboundMessage, Source
from service.telemetry.metrics import Metrics

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)


class TargetKind(str, Enum):
    PUSH = "push"  # an MCP session with an open push stream
    SPONSOR_WAIT = "sponsor_wait"  # a pending wait of a non-push host
    PERMISSION = "permission"  # a pending permission request: takes its sponsor's verdict only

    @property
    def capacity(self) -> int | None:
        """How many messages one target of this kind takes (None: any number). A sponsor wait ends
        with the first message handed to it, and a permission request with its verdict, so each is
        offered one."""
        return None if self is TargetKind.PUSH else 1


class DeliveryTarget(Protocol):
    """Something on this replica that can take a claimed message right now."""

    @property
    def target_id(self) -> str: ...

    @property
    def kind(self) -> TargetKind: ...

    def is_alive(self) -> bool: ...

    def accepts(self, message: InboundMessage) -> bool:
        """Whether this target would take the message (a sponsor wait takes sponsors' chat messages only)."""

    async def deliver(self, message: InboundMessage) -> Handover:
        """Hand the message over, and say whether the target has it. Raise only before anything was
        handed over: the hub then treats the target as one that did not take it."""


class Handover(str, Enum):
    """What one target says of one message it was given."""

    TAKEN = "taken"
    NOT_TAKEN = "not_taken"  # certainly not (the target died, or refused): another target may have it
    # It may have it: a hand-over cut short can still have completed. No other target may have it
    # then, or a host could see the message twice (fail closed; SPEC §10 settles it by acknowledgement).
    IN_DOUBT = "in_doubt"


class DispatchOutcome(str, Enum):
    DELIVERED = "delivered"
    IN_DOUBT = "in_doubt"  # handed to one target that may or may not have it, and offered to no other
    NO_TARGET = "no_target"  # every target died between the claim and the hand-off


@dataclass(frozen=True, slots=True)
class Dispatch:
    """One claimed message's hand-off; it carries the message, so what records it needs nothing else."""

    message: InboundMessage
    outcome: DispatchOutcome
    target_id: str | None = None
    channel: str | None = None

    @property
    def message_id(self) -> str:
        return self.message.message_id


@dataclass
class DeliveryHub:
    """Targets held by this replica. Chats stick to one target while it lives, so a conversation
    reaches one host in order; new chats are spread round-robin over push targets."""

    metrics: Metrics | None = None
    _targets: dict[str, DeliveryTarget] = field(default_factory=dict)
    _sticky: dict[str, str] = field(default_factory=dict)  # chat_id -> target_id
    _rr: itertools.count[int] = field(default_factory=itertools.count)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _generation: int = 0
    _closed: bool = False

    # --- targets ---

    def register(self, target: DeliveryTarget) -> None:
        self._targets[target.target_id] = target
        self._publish()

    def unregister(self, target_id: str) -> None:
        self._targets.pop(target_id, None)
        self._sticky = {c: t for c, t in self._sticky.items() if t != target_id}
        self._publish()

    def close(self) -> None:
        """Stop claiming on behalf of anyone (SIGTERM): pushes in flight finish, nothing new is taken."""
        self._closed = True
        self._publish()

    @property
    def closed(self) -> bool:
        return self._closed

    def live_targets(self) -> list[DeliveryTarget]:
        return [t for t in self._targets.values() if t.is_alive()]

    def _publish(self) -> None:
        if self.metrics is not None:
            live = self.live_targets()
            self.metrics.push_streams.set(sum(1 for t in live if t.kind is TargetKind.PUSH))
            self.metrics.sponsor_waits.set(sum(1 for t in live if t.kind is TargetKind.SPONSOR_WAIT))
        self._changed.set()
        self._changed = asyncio.Event()
        self._generation += 1

    @property
    def generation(self) -> int:
        """Grows with every change of targets: a reader that left a message for another target looks
        again when this moved (a sponsor wait that may take it has started)."""
        return self._generation

    async def wait_for_change(self) -> None:
        """Return when a target is registered or unregistered (lets idle loops wake up at once)."""
        await self._changed.wait()

    # --- the delivery rule ---

    def can_take(self, source: Source) -> bool:
        """Whether any live target could take some message from ``source``: workers poll only then."""
        if self._closed:
            return False
        return any(t.kind is TargetKind.PUSH or source is Source.CHAT for t in self.live_targets())

    def needs_allotment(self, messages: Iterable[InboundMessage]) -> bool:
        """Whether some of these messages would be taken only by a target of bounded capacity (a
        sponsor wait, with no push target that accepts them too). Such messages must go through one
        ``claimable`` call with everything else of the cycle, so the wait gets the oldest of them;
        any other message can be claimed at once, chat by chat."""
        if self._closed:
            return False
        live = self.live_targets()
        for message in messages:
            takers = [t for t in live if t.accepts(message)]
            if takers and all(t.kind.capacity is not None for t in takers):
                return True
        return False

    def claimable(self, messages: Sequence[InboundMessage]) -> list[InboundMessage]:
        """The messages the live targets can take, oldest first; only these may be claimed.

        Each target takes at most its capacity, so a replica whose only target is a sponsor wait is
        offered the oldest message the wait accepts and nothing more; pass every such message of the
        cycle in one call (see ``needs_allotment``). What is left out stays unclaimed in Graph
        for a push host or the next wait, here or on another replica; claiming it for a target that
        cannot take it would record it as delivered with nobody to hand it to.
        """
        if self._closed:
            return []
        live = self.live_targets()
        room: dict[str, int | None] = {t.target_id: t.kind.capacity for t in live}
        chosen: list[InboundMessage] = []
        for message in sorted(messages, key=_delivery_order):
            takers = [t for t in live if room[t.target_id] != 0 and t.accepts(message)]
            if not takers:
                continue
            if all(room[t.target_id] is not None for t in takers):
                bounded = takers[0].target_id
                room[bounded] = (room[bounded] or 0) - 1
            chosen.append(message)
        return chosen

    def has_permission_target_for(self, message: InboundMessage) -> bool:
        return any(t.kind is TargetKind.PERMISSION and t.accepts(message) for t in self.live_targets())

    async def dispatch(self, messages: Sequence[InboundMessage]) -> list[Dispatch]:
        """Hand claimed messages over, oldest first, each to exactly one target.

        A claimed message whose target did not take it is offered to the next live target that accepts
        it; it is lost only when none is left (it stays readable through the read tools). One whose
        target may have taken it (``Handover.IN_DOUBT``) stays with that target: reported, never
        offered again, so no host sees it twice.
        """
        results: list[Dispatch] = []
        for message in sorted(messages, key=_delivery_order):
            with tracer.start_as_current_span("delivery.push", attributes={
                    "entrabot.source": message.source.value, "entrabot.chat_id": message.chat_id,
                    "entrabot.message_id": message.message_id}) as span:
                dispatch = await self._dispatch_one(message)
                span.set_attribute("entrabot.delivery.outcome", dispatch.outcome.value)
            results.append(dispatch)
        return results

    async def _dispatch_one(self, message: InboundMessage) -> Dispatch:
        tried: set[str] = set()
        while True:
            target = self._choose(message, exclude=tried)
            if target is None:
                self._count(message, "none", DispatchOutcome.NO_TARGET.value)
                log.warning(
                    "claimed message had no live target",
                    extra={"chat_id": message.chat_id, "message_id": message.message_id},
                )
                return Dispatch(message, DispatchOutcome.NO_TARGET)
            tried.add(target.target_id)
            try:
                handover = await target.deliver(message)
            except Exception:  # a broken target must not stop the others' deliveries
                log.exception("delivery target failed", extra={"target_id": target.target_id})
                handover = Handover.NOT_TAKEN
            if handover is Handover.NOT_TAKEN:
                self._count(message, target.kind.value, "failed")
                continue
            if handover is Handover.IN_DOUBT:
                self._count(message, target.kind.value, DispatchOutcome.IN_DOUBT.value)
                log.warning(
                    "claimed message may or may not have reached its target; offered to no other",
                    extra={"target_id": target.target_id, "chat_id": message.chat_id,
                           "message_id": message.message_id},
                )
                return Dispatch(message, DispatchOutcome.IN_DOUBT, target.target_id, target.kind.value)
            if message.source is Source.CHAT:
                self._sticky[message.chat_id] = target.target_id
            self._count(message, target.kind.value, DispatchOutcome.DELIVERED.value)
            return Dispatch(message, DispatchOutcome.DELIVERED, target.target_id, target.kind.value)

    def _choose(self, message: InboundMessage, *, exclude: set[str]) -> DeliveryTarget | None:
        candidates = [t for t in self.live_targets() if t.target_id not in exclude and t.accepts(message)]
        if not candidates:
            return None
        # A pending permission request takes only its own verdict, and a pending sponsor wait is a host
        # blocked on exactly this kind of reply: either goes before any push host, so a verdict is never
        # also delivered as an ordinary message.
        for kind in (TargetKind.PERMISSION, TargetKind.SPONSOR_WAIT):
            waiting = [t for t in candidates if t.kind is kind]
            if waiting:
                return waiting[0]
        sticky = self._sticky.get(message.chat_id)
        for t in candidates:
            if t.target_id == sticky:
                return t
        return candidates[next(self._rr) % len(candidates)]

    def _count(self, message: InboundMessage, channel: str, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.deliveries.labels(channel, message.source.value, outcome).inc()


def _delivery_order(message: InboundMessage) -> tuple[object, ...]:
    # Teams ids are creation milliseconds: numeric order breaks ties of equal timestamps as Teams does.
    mid = message.message_id
    return (message.created, 0, int(mid), "") if mid.isascii() and mid.isdigit() else (message.created, 1, 0, mid)

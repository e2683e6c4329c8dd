"""DeliveryHub: the live delivery targets one replica holds, and the hand-off of claimed messages.

The delivery rule (SPEC §1) lives here: a worker asks the hub which of its candidates some live target
could take *before* claiming, and claims only those. A replica whose hub is empty claims nothing, so
the messages stay in Graph for a replica that has a host. What each message's claim is for and where
it stands is its record (service.delivery.deliveries); which target takes it is decided by the rules
(service.delivery.choice); this module holds the targets and does the hand-over.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from opentelemetry import trace

from service.background import Background
from service.delivery.choice import allot, choose, delivery_order, only_bounded_takers
from service.delivery.deliveries import Deliveries
from service.delivery.targets import (
    AcknowledgingTarget,
    DeliveryTarget,
    Dispatch,
    DispatchOutcome,
    Handover,
    TargetKind,
    host_of,
)
from service.domain.message import InboundMessage, Source
from service.telemetry.metrics import DeliveryMetrics

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)

# Where the names the callers import from the hub now live; kept importable here.
__all__ = [
    "DeliveryHub",
    "DeliveryTarget",
    "Dispatch",
    "DispatchOutcome",
    "Handover",
    "TargetKind",
]


@dataclass
class DeliveryHub:
    """Targets held by this replica. Chats stick to one target while it lives, so a conversation
    reaches one host in order; new chats are spread round-robin over push targets."""

    metrics: DeliveryMetrics
    background: Background = field(default_factory=Background)  # the replica's, from the wiring
    deliveries: Deliveries = field(default_factory=Deliveries)
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
        self._offer_returned()

    def hand_back(self, messages: Sequence[InboundMessage]) -> None:
        """A target could not pass these on (they are claimed): the next target that accepts one takes it."""
        self.deliveries.returned(messages)
        self._offer_returned()

    def _offer_returned(self) -> None:
        if self._closed:
            return
        live = self.live_targets()
        takeable = self.deliveries.take_returned(lambda m: any(t.accepts(m) for t in live))
        if takeable:
            self.background.spawn(self._dispatch_returned(takeable), name="hub:returned")

    async def _dispatch_returned(self, messages: list[InboundMessage]) -> list[Dispatch]:
        dispatches = await self.dispatch(messages)
        # One that found no target after all waits for the next one again, never dropped.
        self.deliveries.returned(
            d.message for d in dispatches if d.outcome is DispatchOutcome.NO_TARGET
        )
        return dispatches

    def unregister(self, target_id: str) -> None:
        self._targets.pop(target_id, None)
        self._sticky = {c: t for c, t in self._sticky.items() if t != target_id}
        self.deliveries.release_target(target_id)
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

    def host_target(self, host_id: str) -> DeliveryTarget | None:
        """The newest live target of an acknowledging host on this replica."""
        found = [
            t
            for t in self._targets.values()
            if isinstance(t, AcknowledgingTarget) and t.host_id == host_id and t.is_reading()
        ]
        return found[-1] if found else None

    def has_permission_target_for(self, message: InboundMessage) -> bool:
        return any(
            t.kind is TargetKind.PERMISSION and t.accepts(message) for t in self.live_targets()
        )

    # --- the delivery rule ---

    def can_take(self, source: Source) -> bool:
        """Whether any live target could take some message from ``source``: workers poll only then."""
        if self._closed:
            return False
        return any(t.kind is TargetKind.PUSH or source is Source.CHAT for t in self.live_targets())

    def needs_allotment(self, messages: Iterable[InboundMessage]) -> bool:
        """Whether some of these messages would be taken only by a bounded target (a sponsor wait,
        with no push target that accepts them too). Such messages must go through one ``claimable``
        call with everything else of the cycle, so the wait gets the oldest of them; any other message
        can be claimed at once, chat by chat."""
        if self._closed:
            return False
        live = self.live_targets()
        return any(only_bounded_takers(m, live) for m in self._not_claimed_here(messages))

    def claimable(self, messages: Sequence[InboundMessage]) -> list[InboundMessage]:
        """The messages the live targets can take, oldest first; only these may be claimed.

        A message some push target accepts is claimable. One only bounded targets accept is allotted
        to the first of them with room for it (``room_for``), so a replica whose only target is a
        sponsor wait is offered what fits that wait's one result and nothing more; pass every such
        message of the cycle in one call (see ``needs_allotment``). Each bounded target is told what
        it was allotted and what it had no room for (``allotted``), and ``dispatch`` hands each
        allotted message to its own target. What is left out stays unclaimed in Graph for a push
        host or the next wait, here or on another replica; claiming it for a target that cannot take
        it would record it as delivered with nobody to hand it to.
        """
        if self._closed:
            return []
        live = self.live_targets()
        allotment = allot(self._not_claimed_here(messages), live)
        for t in live:
            taken, left = allotment.taken[t.target_id], allotment.left[t.target_id]
            for message in taken:
                self.deliveries.allot(message, t.target_id)
            if taken or left:
                t.allotted(taken, left)
        return allotment.chosen

    def _not_claimed_here(self, messages: Iterable[InboundMessage]) -> list[InboundMessage]:
        """Less what this hub claimed already. A chat whose fleet watermark stops at a message left
        for a push host is read from that watermark again, and offers the messages claimed ahead of it
        once more; the ledger would never claim them twice, but allotted again they would take a
        bounded target's room and hold its hand-over for a message that never comes."""
        return [m for m in messages if not self.deliveries.claimed_here(m)]

    def reserve(self, messages: Sequence[InboundMessage]) -> dict[str, list[InboundMessage]]:
        """Which of ``messages``, about to be claimed, go to an acknowledging host: host id -> its
        messages, oldest first. Each is reserved for that host, and ``dispatch`` hands it to that host's
        target or to nobody; the caller writes them into the host's record before the claim."""
        plan: dict[str, list[InboundMessage]] = {}
        for message in sorted(messages, key=delivery_order):
            host = self.deliveries.reserved_for(message)
            if host is None:
                target = self._choose(message, exclude=set(), first_try=True)
                host = host_of(target) if target is not None else None
                if host is None:
                    continue
                self.deliveries.reserve(message, host)
                if target is not None and message.source is Source.CHAT:
                    self._sticky[message.chat_id] = target.target_id
            plan.setdefault(host, []).append(message)
        return plan

    def unreserve(self, messages: Iterable[InboundMessage]) -> None:
        """Their claim did not land: they are nobody's yet."""
        self.deliveries.unreserve(messages)

    def _choose(
        self, message: InboundMessage, *, exclude: set[str], first_try: bool
    ) -> DeliveryTarget | None:
        """Only a message's first try goes to the target it was allotted to (its room was taken)."""
        candidates = [
            t for t in self.live_targets() if t.target_id not in exclude and t.accepts(message)
        ]
        return choose(
            message,
            candidates,
            allotted_to=self.deliveries.allotted_to(message) if first_try else None,
            sticky=self._sticky.get(message.chat_id),
            turns=self._rr,
        )

    # --- the hand-over ---

    async def dispatch(self, messages: Sequence[InboundMessage]) -> list[Dispatch]:
        """Hand claimed messages over, oldest first, each to exactly one target.

        A claimed message whose target did not take it is offered to the next live target that accepts
        it; it is lost only when none is left (it stays readable through the read tools). One whose
        target may have taken it (``Handover.IN_DOUBT``) stays with that target: reported, never
        offered again, so no host sees it twice.
        """
        results: list[Dispatch] = []
        for message in sorted(messages, key=delivery_order):
            with tracer.start_as_current_span(
                "delivery.push",
                attributes={
                    "entrabot.source": message.source.value,
                    "entrabot.chat_id": message.chat_id,
                    "entrabot.message_id": message.message_id,
                },
            ) as span:
                dispatch = await self._dispatch_one(message)
                span.set_attribute("entrabot.delivery.outcome", dispatch.outcome.value)
            results.append(dispatch)
        return results

    async def _dispatch_one(self, message: InboundMessage) -> Dispatch:
        host = self.deliveries.reserved_for(message)
        if host is not None:
            return await self._dispatch_owed(message, host)
        allotted = self._choose(message, exclude=set(), first_try=True)
        self.deliveries.claim(message)
        tried: set[str] = set()
        target = allotted
        while target is not None:
            tried.add(target.target_id)
            handover = await _hand(target, message)
            if handover is Handover.NOT_TAKEN:
                self._count(message, target.kind.value, "failed")
                target = self._choose(message, exclude=tried, first_try=False)
                continue
            self.deliveries.handed_over(message)  # never allotted or offered again
            if handover is Handover.IN_DOUBT:
                self._count(message, target.kind.value, DispatchOutcome.IN_DOUBT.value)
                log.warning(
                    "claimed message may or may not have reached its target; offered to no other",
                    extra={**_ids(message), "target_id": target.target_id},
                )
                return Dispatch(
                    message, DispatchOutcome.IN_DOUBT, target.target_id, target.kind.value
                )
            if message.source is Source.CHAT:
                self._sticky[message.chat_id] = target.target_id
            self._count(message, target.kind.value, DispatchOutcome.DELIVERED.value)
            return Dispatch(message, DispatchOutcome.DELIVERED, target.target_id, target.kind.value)
        self._count(message, "none", DispatchOutcome.NO_TARGET.value)
        log.warning("claimed message had no live target", extra=_ids(message))
        return Dispatch(message, DispatchOutcome.NO_TARGET)

    async def _dispatch_owed(self, message: InboundMessage, host: str) -> Dispatch:
        """A message in ``host``'s delivery record: that host's target here takes it, or it waits in the
        record for the host's next session (on any replica). Offered to no other host."""
        self.deliveries.handed_over(message)
        target = self.host_target(host)
        handover = await _hand(target, message) if target is not None else Handover.NOT_TAKEN
        if target is None or handover is Handover.NOT_TAKEN:
            self._count(message, "push", DispatchOutcome.PENDING.value)
            return Dispatch(message, DispatchOutcome.PENDING, None, "push")
        self._count(message, target.kind.value, DispatchOutcome.PUSHED.value)
        return Dispatch(message, DispatchOutcome.PUSHED, target.target_id, target.kind.value)

    def _count(self, message: InboundMessage, channel: str, outcome: str) -> None:
        self.metrics.deliveries.labels(channel, message.source.value, outcome).inc()


async def _hand(target: DeliveryTarget, message: InboundMessage) -> Handover:
    try:
        return await target.deliver(message)
    except Exception:  # a broken target must not stop the others' deliveries
        log.exception("delivery target failed", extra={"target_id": target.target_id})
        return Handover.NOT_TAKEN


def _ids(message: InboundMessage) -> dict[str, str]:
    return {"chat_id": message.chat_id, "message_id": message.message_id}

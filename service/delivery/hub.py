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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


from service.background import Background
from service.delivery.choice import allot, choose, delivery_order, only_bounded_takers
from service.delivery.deliveries import Deliveries
from service.delivery.handover import hand_over
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
        return any(not t.kind.bounded or source is Source.CHAT for t in self.live_targets())

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
                target = self.choose_for(message, exclude=set(), first_try=True)
                host = host_of(target) if target is not None else None
                if host is None:
                    continue
                self.deliveries.reserve(message, host)
                if target is not None:
                    self.stick(message, target.target_id)
            plan.setdefault(host, []).append(message)
        return plan

    def unreserve(self, messages: Iterable[InboundMessage]) -> None:
        """Their claim did not land: they are nobody's yet."""
        self.deliveries.unreserve(messages)

    def choose_for(
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
        """Hand claimed messages over, oldest first, each to exactly one target
        (service.delivery.handover)."""
        return await hand_over(self, messages)

    def stick(self, message: InboundMessage, target_id: str) -> None:
        """A chat's next messages go to the target that took this one, while it lives."""
        if message.source is Source.CHAT:
            self._sticky[message.chat_id] = target_id

"""DeliveryHub: the live delivery targets one replica holds, and the hand-off of claimed messages.

The delivery rule (SPEC §1) lives here: a worker asks the hub which of its candidates some live target
could take *before* claiming, and claims only those. A replica whose hub is empty claims nothing, so
the messages stay in Graph for a replica that has a host.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol, runtime_checkable

from opentelemetry import trace

from service.background import Background
from service.domain.message import InboundMessage, MessageKey, Source
from service.telemetry.metrics import DeliveryMetrics

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)

# How many handed-over message ids the hub remembers: a chat read again within minutes offers them again.
HANDED_OVER_MEMORY = 4096


class TargetKind(str, Enum):
    PUSH = "push"  # an MCP session with an open push stream
    SPONSOR_WAIT = "sponsor_wait"  # a pending wait of a non-push host
    PERMISSION = "permission"  # a pending permission request: takes its sponsor's verdict only

    @property
    def bounded(self) -> bool:
        """Whether a target of this kind takes only what fits one hand-over (a sponsor wait's one tool
        result, a permission request's one verdict): the hub then allots it its messages before they
        are claimed (``DeliveryTarget.room_for``). A push session takes any number."""
        return self is not TargetKind.PUSH


class DeliveryTarget(Protocol):
    """Something on this replica that can take a claimed message right now."""

    @property
    def target_id(self) -> str: ...

    @property
    def kind(self) -> TargetKind: ...

    def is_alive(self) -> bool: ...

    def accepts(self, message: InboundMessage) -> bool:
        """Whether this target would take the message (a sponsor wait takes sponsors' chat messages only)."""

    def room_for(self, message: InboundMessage, alongside: Sequence[InboundMessage]) -> bool:
        """Whether a bounded target has room for ``message`` besides what it holds and ``alongside``
        (what this allotment already gave it). Asked of bounded kinds only."""

    def allotted(self, taken: Sequence[InboundMessage], left: Sequence[InboundMessage]) -> None:
        """One allotment's outcome for a bounded target: ``taken`` is claimed next and handed over by
        ``dispatch``; ``left`` it would have taken but had no room for (left unclaimed). Told to bounded
        kinds only, and only when either is non-empty."""

    async def deliver(self, message: InboundMessage) -> Handover:
        """Hand the message over, and say whether the target has it. Raise only before anything was
        handed over: the hub then treats the target as one that did not take it."""


@runtime_checkable
class AcknowledgingTarget(Protocol):
    """A target whose host acknowledges what it got (a channel bridge that named its host): what is
    claimed for it is written to that host's delivery record first, and owed to that host alone
    until it acknowledges (service.delivery.claim_intents). ``host_id`` None: it does not."""

    @property
    def host_id(self) -> str | None: ...

    def is_reading(self) -> bool:
        """Alive for what the host is owed already, even when its record takes no new claims."""


def host_of(target: DeliveryTarget) -> str | None:
    return target.host_id if isinstance(target, AcknowledgingTarget) else None


class Handover(str, Enum):
    """What one target says of one message it was given."""

    TAKEN = "taken"
    NOT_TAKEN = (
        "not_taken"  # certainly not (the target died, or refused): another target may have it
    )
    # It may have it: a hand-over cut short can still have completed. No other target may have it
    # then, or a host could see the message twice (fail closed; SPEC §10 settles it by acknowledgement).
    IN_DOUBT = "in_doubt"


class DispatchOutcome(str, Enum):
    DELIVERED = "delivered"
    IN_DOUBT = (
        "in_doubt"  # handed to one target that may or may not have it, and offered to no other
    )
    NO_TARGET = "no_target"  # every target died between the claim and the hand-off
    # Owed to an acknowledging host (in its delivery record): pushed to it and awaiting its
    # acknowledgement, or held for it while it has no live session here. Never another host's.
    PUSHED = "pushed"
    PENDING = "pending"


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

    metrics: DeliveryMetrics
    background: Background = field(default_factory=Background)  # the replica's, from the wiring
    _targets: dict[str, DeliveryTarget] = field(default_factory=dict)
    _sticky: dict[str, str] = field(default_factory=dict)  # chat_id -> target_id
    _allotted: dict[MessageKey, str] = field(
        default_factory=dict
    )  # -> the bounded target it was allotted to
    _handed_over: OrderedDict[MessageKey, None] = field(
        default_factory=OrderedDict
    )  # the newest HANDED_OVER_MEMORY
    # -> the acknowledging host its claim's intent names: dispatched to that host only
    _reserved: OrderedDict[MessageKey, str] = field(default_factory=OrderedDict)
    # Claimed messages a target took and could not pass on (a sponsor wait whose host went away before
    # its result was written): given to the next live target that accepts them, oldest first.
    _returned: list[InboundMessage] = field(default_factory=list)
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
        have = {m.key for m in self._returned}
        self._returned += [m for m in messages if m.key not in have]
        self._offer_returned()

    def _offer_returned(self) -> None:
        if not self._returned or self._closed:
            return
        live = self.live_targets()
        takeable = [m for m in self._returned if any(t.accepts(m) for t in live)]
        if not takeable:
            return
        self._returned = [m for m in self._returned if m not in takeable]
        self.background.spawn(self._dispatch_returned(takeable), name="hub:returned")

    async def _dispatch_returned(self, messages: list[InboundMessage]) -> list[Dispatch]:
        dispatches = await self.dispatch(messages)
        # One that found no target after all waits for the next one again, never dropped.
        self._returned += [d.message for d in dispatches if d.outcome is DispatchOutcome.NO_TARGET]
        return dispatches

    def unregister(self, target_id: str) -> None:
        self._targets.pop(target_id, None)
        self._sticky = {c: t for c, t in self._sticky.items() if t != target_id}
        self._allotted = {m: t for m, t in self._allotted.items() if t != target_id}
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
        for message in self._not_handed_over(messages):
            takers = [t for t in live if t.accepts(message)]
            if takers and all(t.kind.bounded for t in takers):
                return True
        return False

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
        taken: dict[str, list[InboundMessage]] = {t.target_id: [] for t in live}
        left: dict[str, list[InboundMessage]] = {t.target_id: [] for t in live}
        chosen: list[InboundMessage] = []
        for message in sorted(self._not_handed_over(messages), key=_delivery_order):
            takers = [t for t in live if t.accepts(message)]
            if not takers:
                continue
            if not all(t.kind.bounded for t in takers):
                chosen.append(message)
                continue
            roomy = next((t for t in takers if t.room_for(message, taken[t.target_id])), None)
            if roomy is None:
                for t in takers:
                    left[t.target_id].append(message)
                continue
            taken[roomy.target_id].append(message)
            self._allotted[message.key] = roomy.target_id
            chosen.append(message)
        for t in live:
            if taken[t.target_id] or left[t.target_id]:
                t.allotted(taken[t.target_id], left[t.target_id])
        return chosen

    def _not_handed_over(self, messages: Iterable[InboundMessage]) -> list[InboundMessage]:
        """Less what this hub handed over already. A chat whose fleet watermark stops at a message left
        for a push host is read from that watermark again, and offers the messages claimed ahead of it
        once more; the ledger would never claim them twice, but allotted again they would take a
        bounded target's room and hold its hand-over for a message that never comes."""
        return [m for m in messages if m.key not in self._handed_over]

    def _remember_handed_over(self, message: InboundMessage) -> None:
        self._handed_over[message.key] = None
        if len(self._handed_over) > HANDED_OVER_MEMORY:
            self._handed_over.popitem(last=False)

    def has_permission_target_for(self, message: InboundMessage) -> bool:
        return any(
            t.kind is TargetKind.PERMISSION and t.accepts(message) for t in self.live_targets()
        )

    def reserve(self, messages: Sequence[InboundMessage]) -> dict[str, list[InboundMessage]]:
        """Which of ``messages``, about to be claimed, go to an acknowledging host: host id -> its
        messages, oldest first. Each is reserved for that host, and ``dispatch`` hands it to that host's
        target or to nobody; the caller writes them into the host's record before the claim."""
        plan: dict[str, list[InboundMessage]] = {}
        for message in sorted(messages, key=_delivery_order):
            host = self._reserved.get(message.key)
            if host is None:
                target = self._choose(message, exclude=set(), consume=False)
                host = host_of(target) if target is not None else None
                if host is None:
                    continue
                self._reserved[message.key] = host
                if target is not None and message.source is Source.CHAT:
                    self._sticky[message.chat_id] = target.target_id
                while len(self._reserved) > HANDED_OVER_MEMORY:
                    self._reserved.popitem(last=False)
            plan.setdefault(host, []).append(message)
        return plan

    def unreserve(self, messages: Iterable[InboundMessage]) -> None:
        """Their claim did not land: they are nobody's yet."""
        for message in messages:
            self._reserved.pop(message.key, None)

    def host_target(self, host_id: str) -> DeliveryTarget | None:
        """The newest live target of an acknowledging host on this replica."""
        found = [
            t
            for t in self._targets.values()
            if isinstance(t, AcknowledgingTarget) and t.host_id == host_id and t.is_reading()
        ]
        return found[-1] if found else None

    async def dispatch(self, messages: Sequence[InboundMessage]) -> list[Dispatch]:
        """Hand claimed messages over, oldest first, each to exactly one target.

        A claimed message whose target did not take it is offered to the next live target that accepts
        it; it is lost only when none is left (it stays readable through the read tools). One whose
        target may have taken it (``Handover.IN_DOUBT``) stays with that target: reported, never
        offered again, so no host sees it twice.
        """
        results: list[Dispatch] = []
        for message in sorted(messages, key=_delivery_order):
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
        host = self._reserved.pop(message.key, None)
        if host is not None:
            return await self._dispatch_owed(message, host)
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
                    extra={
                        "target_id": target.target_id,
                        "chat_id": message.chat_id,
                        "message_id": message.message_id,
                    },
                )
                self._remember_handed_over(
                    message
                )  # it may be with that target: never allotted again
                return Dispatch(
                    message, DispatchOutcome.IN_DOUBT, target.target_id, target.kind.value
                )
            self._remember_handed_over(message)
            if message.source is Source.CHAT:
                self._sticky[message.chat_id] = target.target_id
            self._count(message, target.kind.value, DispatchOutcome.DELIVERED.value)
            return Dispatch(message, DispatchOutcome.DELIVERED, target.target_id, target.kind.value)

    async def _dispatch_owed(self, message: InboundMessage, host: str) -> Dispatch:
        """A message in ``host``'s delivery record: that host's target here takes it, or it waits in the
        record for the host's next session (on any replica). Offered to no other host."""
        self._remember_handed_over(message)
        target = self.host_target(host)
        handover = Handover.NOT_TAKEN
        if target is not None:
            try:
                handover = await target.deliver(message)
            except Exception:  # a broken target must not stop the others' deliveries
                log.exception("delivery target failed", extra={"target_id": target.target_id})
        if target is None or handover is Handover.NOT_TAKEN:
            self._count(message, "push", DispatchOutcome.PENDING.value)
            return Dispatch(message, DispatchOutcome.PENDING, None, "push")
        self._count(message, target.kind.value, DispatchOutcome.PUSHED.value)
        return Dispatch(message, DispatchOutcome.PUSHED, target.target_id, target.kind.value)

    def _choose(
        self, message: InboundMessage, *, exclude: set[str], consume: bool = True
    ) -> DeliveryTarget | None:
        candidates = [
            t for t in self.live_targets() if t.target_id not in exclude and t.accepts(message)
        ]
        if not candidates:
            return None
        # An allotted message goes to the target it was allotted to, whose room it took.
        allotted = (
            self._allotted.pop(message.key, None) if consume else self._allotted.get(message.key)
        )
        for t in candidates:
            if t.target_id == allotted:
                return t
        # A bounded target takes a message it was not allotted (claimed for a push host beside it)
        # only while it has room; the push host takes it otherwise.
        candidates = [t for t in candidates if not t.kind.bounded or t.room_for(message, ())]
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
        return candidates[next(self._rr) % len(candidates)] if candidates else None

    def _count(self, message: InboundMessage, channel: str, outcome: str) -> None:
        self.metrics.deliveries.labels(channel, message.source.value, outcome).inc()


def _delivery_order(message: InboundMessage) -> tuple[object, ...]:
    # Teams ids are creation milliseconds: numeric order breaks ties of equal timestamps as Teams does.
    mid = message.message_id
    return (
        (message.created, 0, int(mid), "")
        if mid.isascii() and mid.isdigit()
        else (message.created, 1, 0, mid)
    )

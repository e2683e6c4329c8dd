"""What a claimed message can be handed to on this replica, and what a hand-over says.

A target is a push session, a sponsor wait or a permission request; the hub holds the live ones
(service.delivery.hub) and the rules choose among them (service.delivery.choice).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol, runtime_checkable

from service.domain.message import InboundMessage


class TargetKind(str, Enum):
    PUSH = "push"  # an MCP session with an open push stream
    INBOX = "inbox"  # a host that calls receive_messages: what is claimed waits in its record
    SPONSOR_WAIT = "sponsor_wait"  # a pending wait of a non-push host
    PERMISSION = "permission"  # a pending permission request: takes its sponsor's verdict only

    @property
    def bounded(self) -> bool:
        """Whether a target of this kind takes only what fits one hand-over (a sponsor wait's one tool
        result, a permission request's one verdict): the hub then allots it its messages before they
        are claimed (``DeliveryTarget.room_for``). A push session or an inbox takes any number."""
        return self not in (TargetKind.PUSH, TargetKind.INBOX)


class Handover(str, Enum):
    """What one target says of one message it was given."""

    TAKEN = "taken"
    # Certainly not (the target died, or refused): another target may have it.
    NOT_TAKEN = "not_taken"
    # It may have it: a hand-over cut short can still have completed. No other target may have it
    # then, or a host could see the message twice (fail closed; SPEC §10 settles it by acknowledgement).
    IN_DOUBT = "in_doubt"


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


class DispatchOutcome(str, Enum):
    DELIVERED = "delivered"
    # Handed to one target that may or may not have it, and offered to no other.
    IN_DOUBT = "in_doubt"
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

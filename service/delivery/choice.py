"""The delivery rule's choices, as functions of the live targets and a message's record: which
messages may be claimed (and which bounded target each is allotted to), and which target takes a
claimed message. No I/O and no state of their own: the hub holds the targets and the records
(service.delivery.deliveries) and does the hand-over.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from service.delivery.targets import DeliveryTarget, TargetKind
from service.domain.message import InboundMessage


@dataclass
class Allotment:
    """One ``claimable`` pass: what may be claimed, and what each bounded target was given or left."""

    chosen: list[InboundMessage] = field(default_factory=list)
    taken: dict[str, list[InboundMessage]] = field(
        default_factory=dict
    )  # target id -> its messages
    left: dict[str, list[InboundMessage]] = field(default_factory=dict)  # target id -> no room for


def allot(messages: Sequence[InboundMessage], live: Sequence[DeliveryTarget]) -> Allotment:
    """The messages the live targets can take, oldest first (see ``DeliveryHub.claimable``).

    One some push target accepts may be claimed; one only bounded targets accept goes to the first
    of them with room for it besides what this pass already gave it, and is left out otherwise.
    """
    result = Allotment(taken={t.target_id: [] for t in live}, left={t.target_id: [] for t in live})
    for message in sorted(messages, key=delivery_order):
        takers = [t for t in live if t.accepts(message)]
        if not takers:
            continue
        if not all(t.kind.bounded for t in takers):
            result.chosen.append(message)
            continue
        roomy = next((t for t in takers if t.room_for(message, result.taken[t.target_id])), None)
        if roomy is None:
            for t in takers:
                result.left[t.target_id].append(message)
            continue
        result.taken[roomy.target_id].append(message)
        result.chosen.append(message)
    return result


def only_bounded_takers(message: InboundMessage, live: Sequence[DeliveryTarget]) -> bool:
    takers = [t for t in live if t.accepts(message)]
    return bool(takers) and all(t.kind.bounded for t in takers)


def choose(
    message: InboundMessage,
    candidates: Sequence[DeliveryTarget],
    *,
    allotted_to: str | None,
    sticky: str | None,
    turns: Iterator[int],
) -> DeliveryTarget | None:
    """The target that takes a claimed message, among live ones that accept it.

    An allotted message goes to the target it was allotted to, whose room it took. A bounded target
    takes a message it was not allotted (claimed for a push host beside it) only while it has room.
    A pending permission request takes only its own verdict, and a pending sponsor wait is a host
    blocked on exactly this kind of reply: either goes before any push host, so a verdict is never
    also delivered as an ordinary message. Then the chat's sticky target, so a conversation reaches
    one host in order; else the next in turn (``turns``, round-robin).
    """
    for t in candidates:
        if t.target_id == allotted_to:
            return t
    roomy = [t for t in candidates if not t.kind.bounded or t.room_for(message, ())]
    for kind in (TargetKind.PERMISSION, TargetKind.SPONSOR_WAIT):
        waiting = [t for t in roomy if t.kind is kind]
        if waiting:
            return waiting[0]
    for t in roomy:
        if t.target_id == sticky:
            return t
    return roomy[next(turns) % len(roomy)] if roomy else None


def delivery_order(message: InboundMessage) -> tuple[object, ...]:
    # Teams ids are creation milliseconds: numeric order breaks ties of equal timestamps as Teams does.
    mid = message.message_id
    return (
        (message.created, 0, int(mid), "")
        if mid.isascii() and mid.isdigit()
        else (message.created, 1, 0, mid)
    )

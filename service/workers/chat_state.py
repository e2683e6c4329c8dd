"""Per-chat poll state, and the pure decisions the chat poll makes over what Graph returned."""

from __future__ import annotations

from collections.abc import Sequence, Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum

from service.delivery.message import InboundMessage
from service.graph.models import ChatMessage


class ChatPhase(str, Enum):
    NEEDS_RESOLUTION = "needs_resolution"  # the shared cursor has not been read (or must be re-read)
    NOT_BOOTSTRAPPED = "not_bootstrapped"  # the cursor is ABSENT: first sight pending
    STEADY = "steady"  # polling messages newer than the watermark


@dataclass
class ChatPollState:
    """What this replica knows about one chat between cycles."""

    chat_id: str
    phase: ChatPhase = ChatPhase.NEEDS_RESOLUTION
    # Lower bound for the next fetch (compared with lastModifiedDateTime; every message created after
    # it is modified after it too). Moves only over messages whose fate is decided.
    watermark: datetime | None = None
    # Registered by create_chat: its newest message surfaces on first sight whatever its age. The
    # fleet learns it from the cursor create_chat writes; this flag covers only a failed write.
    surface_newest_regardless_of_age: bool = False
    # Messages offered in a claim whose write is in doubt; delivered if it settles as ours.
    held: dict[str, InboundMessage] = field(default_factory=dict)


@dataclass(frozen=True)
class ChatRead:
    """What one chat offers for a claim this cycle, read before anything is claimed.

    ``ordered``: the messages past the watermark, oldest first (at first sight, the newest alone).
    ``inbound``: the human ones among them as the hub would get them, by id; only these may be offered.
    ``fetched``: everything Graph returned, by id (a settled earlier claim may name one of them).
    """

    state: ChatPollState
    ordered: tuple[ChatMessage, ...]
    inbound: dict[str, InboundMessage]
    fetched: dict[str, ChatMessage]
    first_sight: bool = False
    started: float | None = None  # when the read began (monotonic): a hint learned later still wants a read


def first_sight_surfaces(
    newest: ChatMessage, *, now: datetime, max_age: timedelta, regardless_of_age: bool
) -> bool:
    """Whether a chat's newest message may surface on first sight (it is not a replay of history)."""
    return regardless_of_age or now - newest.created_date_time < max_age


@dataclass(frozen=True)
class Offer:
    """What one steady cycle offers to the ledger for one chat.

    ``candidates``: the human messages a live target here can take, oldest first.
    ``seen_up_to``: the creation time of the newest message of the decided prefix — everything up to
    the first human message no target here can take; None when nothing is decided.
    ``blocked``: such a message exists. Then the candidates after it are claimed *ahead* of the
    watermark (the fleet's watermark stops before the blocker, which another replica's host may
    still take), as happens when a sponsor wait takes a reply that follows someone else's message.
    """

    candidates: tuple[ChatMessage, ...]
    seen_up_to: datetime | None
    blocked: bool


def decide_offer(
    fetched_oldest_first: Sequence[ChatMessage], human_ids: AbstractSet[str], takeable_ids: AbstractSet[str]
) -> Offer:
    candidates: list[ChatMessage] = []
    seen_up_to: datetime | None = None
    blocked = False
    for message in fetched_oldest_first:
        if message.id in human_ids:
            if message.id not in takeable_ids:
                blocked = True
                continue
            candidates.append(message)
        if not blocked:
            seen_up_to = message.created_date_time
    return Offer(tuple(candidates), seen_up_to, blocked)

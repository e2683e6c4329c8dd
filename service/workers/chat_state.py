"""Per-chat poll state, and the pure decisions the chat poll makes over what Graph returned."""

from __future__ import annotations

from collections.abc import Sequence, Set as AbstractSet
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum

from service.clock import later
from service.domain.message import InboundMessage
from service.graph.models import ChatMessage
from service.ledger.records.reads import ReadOutcome
from service.ledger.claims.chat_claim_types import CursorRead
from service.ledger.claims.chat_cursor import Candidate
from service.workers.chat_wants import Behind, WantedRead


class ChatPhase(str, Enum):
    NEEDS_RESOLUTION = (
        "needs_resolution"  # the shared cursor has not been read (or must be re-read)
    )
    NOT_BOOTSTRAPPED = "not_bootstrapped"  # the cursor is ABSENT: first sight pending
    STEADY = "steady"  # polling messages newer than the watermark


class ReadMiss(Enum):
    """Why a chat read offers nothing to claim, which says whether the want that led to it is met."""

    DECIDED = "decided"  # everything it found is decided: nothing new, or a first sight's baseline
    FAILED = (
        "failed"  # nothing was decided (Graph, the store, an unreadable page): read it again soon
    )


@dataclass
class ChatPollState:
    """Everything this replica knows about one chat between cycles: one object per chat (the ChatBook
    holds them), so a chat's phase, its want and its last read are never looked up in separate maps."""

    chat_id: str
    phase: ChatPhase = ChatPhase.NEEDS_RESOLUTION
    # Lower bound for the next fetch (compared with lastModifiedDateTime; every message created after
    # it is modified after it too). Moves only over messages whose fate is decided.
    watermark: datetime | None = None
    # Registered by create_chat: its newest message surfaces on first sight whatever its age. The
    # fleet learns it from the cursor create_chat writes; this flag covers only a failed write.
    surface_newest_regardless_of_age: bool = False
    # The fleet's cursor names it (``ChatCursor.any_age_id``): create_chat's newest, which the age
    # bound on delivery spares.
    any_age_id: str | None = None
    # Why the chat must be read (a hint, a doubt of our own); set and cleared through the ChatBook,
    # which indexes the chats that have one.
    wanted: WantedRead | None = None
    # A read left a message for a target this replica did not have (ChatBook.reconsider_behind).
    behind: Behind | None = None
    read_at: float = float("-inf")  # monotonic: this replica's last Graph read of the chat
    # The fleet's cursor as the look before the last Graph read found it (with its ETag), and when
    # (monotonic): the claim of that read writes against it rather than reading the cursor again.
    seen_cursor: CursorRead | None = None
    seen_cursor_at: float = float("-inf")

    def covers(self, wanted: WantedRead) -> bool:
        """This replica's own steady view already covers the want (no I/O)."""
        return self.phase is ChatPhase.STEADY and wanted.covered_by_watermark(self.watermark)

    def take_seen_cursor(self, now: float, max_age_s: float) -> CursorRead | None:
        """The cursor read of the last look, once (a claim's write changes its ETag), if it is recent."""
        seen, self.seen_cursor = self.seen_cursor, None
        return seen if seen is not None and now - self.seen_cursor_at <= max_age_s else None

    def adopt(self, cursor: CursorRead, *, in_doubt: bool) -> None:
        """Take the fleet's cursor: its watermark covers only messages whose fate is decided. Not while
        a claim of ours is in doubt here: its settlement needs the chat read from our watermark."""
        if cursor.outcome is ReadOutcome.ABSENT:
            if self.phase is not ChatPhase.STEADY:
                self.phase = ChatPhase.NOT_BOOTSTRAPPED
            return
        if cursor.value is None:
            return
        self.any_age_id = cursor.value.any_age_id
        if self.phase is not ChatPhase.STEADY:
            self.phase, self.watermark = ChatPhase.STEADY, cursor.value.last_ts
        elif not in_doubt:
            self.watermark = later(self.watermark, cursor.value.last_ts)


@dataclass(frozen=True, slots=True)
class OfferedMessage:
    """One message from the read to the push: what the ledger claims (its id and creation time) and
    what the hub delivers (``inbound``, None when it is nobody's to deliver: a system message, the
    agent's own, a deleted one) travel together, so nothing is joined again by id after a claim."""

    message: ChatMessage
    inbound: InboundMessage | None

    @property
    def id(self) -> str:
        return self.message.id

    @property
    def created(self) -> datetime:
        return self.message.created_date_time

    @property
    def candidate(self) -> Candidate:
        return Candidate(self.message.id, self.message.created_date_time)


@dataclass(frozen=True)
class ChatRead:
    """What one chat offers for a claim this cycle, read before anything is claimed.

    ``messages``: the messages past the watermark, oldest first (at first sight, the newest alone).
    """

    state: ChatPollState
    messages: tuple[OfferedMessage, ...]
    first_sight: bool = False
    complete: bool = True  # every page since the watermark was read (not cut by the page budget)
    started: float | None = (
        None  # when the read began (monotonic): a hint learned later still wants a read
    )

    @property
    def inbound(self) -> list[InboundMessage]:
        """The offered messages a person wrote, as the hub would get them."""
        return [m.inbound for m in self.messages if m.inbound is not None]


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

    candidates: tuple[OfferedMessage, ...]
    seen_up_to: datetime | None
    blocked: bool
    left: datetime | None = (
        None  # the newest creation time among the messages no target here can take
    )


def decide_offer(
    messages_oldest_first: Sequence[OfferedMessage], takeable_ids: AbstractSet[str]
) -> Offer:
    candidates: list[OfferedMessage] = []
    seen_up_to: datetime | None = None
    left: datetime | None = None
    for message in messages_oldest_first:
        if message.inbound is not None:
            if message.id not in takeable_ids:
                left = message.created
                continue
            candidates.append(message)
        if left is None:
            seen_up_to = message.created
    return Offer(tuple(candidates), seen_up_to, left is not None, left)

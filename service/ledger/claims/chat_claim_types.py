"""What a chat claim asks (``ClaimRequest``) and what it answers (``ChatClaim``).

What the caller passes:

* ``candidates``: the messages it would deliver, after its own filters, each with its Graph id and
  creation time. It should offer every message newer than its own watermark, not only new ones.
* ``last_ts``: the newest creation time it has seen, including messages it filtered out (its own
  messages, system messages). Messages strictly older than the recorded watermark that are not in
  the tail are decided as "behind" for every replica, so never pass a time beyond a message you
  would still deliver but did not offer in this call.
* One call per chat at a time (``ChatLedger`` serializes them): the memory of an unsettled write
  has one slot per chat.

What it gets back: the messages to push (``won``, oldest first, whatever the outcome: they may include
a batch settled from an earlier call), and whether it may advance its own watermark past ``candidates``.

The ledger is generic over the offered message (``Offer``: anything that names its ``Candidate``), as
``EmailClaimer[M]`` is over the mail: the message offered is the message won, and a claim in doubt keeps
its messages here, in the one memory of unsettled writes, so nothing is joined again by id after it settles.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Generic, Protocol, TypeVar

from service.ledger.claims.chat_cursor import Candidate, ChatCursor
from service.ledger.claims.claim_intent import ClaimIntent
from service.ledger.claims.settle import ClaimWrite, Settlement
from service.ledger.records.reads import Read, ReadOutcome

CursorRead = Read[ChatCursor]


class Offer(Protocol):
    """A message offered for a claim: what the cursor rules need of it is its ``Candidate``."""

    @property
    def candidate(self) -> Candidate: ...


M = TypeVar("M", bound=Offer)


class ChatClaimOutcome(str, Enum):
    CLAIMED = "claimed"  # this replica won at least one candidate
    NOTHING_NEW = (
        "nothing_new"  # no candidates were offered, or a first sight found the chat no longer new
    )
    LOST = "lost"  # every candidate is already recorded (claimed by others) or behind the watermark
    UNRESOLVED = "unresolved"  # an ambiguity: nothing new claimed, keep the candidates


class ClaimProblem(str, Enum):
    """Why a claim is UNRESOLVED."""

    READ_FAILED = "read_failed"
    CORRUPT = "corrupt"
    NO_ETAG = "no_etag"
    EXHAUSTED = "exhausted"  # every compare-and-swap lost a race
    UNKNOWN_OUTCOME = "unknown_outcome"  # our write may or may not have landed; settled next call
    UNSETTLED = "unsettled"  # an earlier unknown write still cannot be settled
    INTENT_FAILED = (
        "intent_failed"  # the host's delivery record could not take the intent: nothing written
    )


@dataclass(frozen=True)
class ChatClaim(Generic[M]):
    chat_id: str
    outcome: ChatClaimOutcome
    won: tuple[M, ...] = ()  # won by this replica: push these, oldest first, whatever the outcome
    problem: ClaimProblem | None = None
    settled: Settlement | None = (
        None  # how an earlier unsettled write settled at the start of this call
    )
    writes: int = 0  # conditional writes sent, retries included

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(m.candidate.id for m in self.won)

    @property
    def may_advance(self) -> bool:
        """True when every candidate's fate is decided, so the worker may move its watermark past them."""
        return self.outcome is not ChatClaimOutcome.UNRESOLVED


@dataclass(frozen=True)
class UnsettledChatClaim(Generic[M]):
    """A claim write whose outcome is not known yet, and the messages it would win."""

    write: ClaimWrite
    messages: tuple[M, ...]

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(m.candidate.id for m in self.messages)


@dataclass(frozen=True)
class ClaimRequest(Generic[M]):
    """What one claim asks (the module docstring says what to offer and what comes back).

    ``advance_watermark=False``: the candidates lie beyond a message this replica cannot take (a
    sponsor wait's reply after someone else's message); the watermark moves only to ``last_ts``.

    ``new_chat=True``: a first sight's claim, valid only while the chat has no cursor. A first sight
    offers the newest message alone and moves the watermark to it, which is right only for a chat
    the fleet has never seen; once some replica has written a cursor, the messages between its
    watermark and the newest may be unclaimed, so nothing is claimed (NOTHING_NEW: read the
    cursor and poll as usual).

    ``intent`` is told what each write will win before it is sent (and may veto it), and how it settled.

    ``known``: the cursor as the caller read it a moment ago (before reading the chat from Graph): the
    claim decides on it and writes against its ETag instead of reading the cursor again. A read that is
    stale by then costs a failed compare-and-swap, after which the claim reads and decides afresh, as
    after any lost race; an unresolved one is not used.
    """

    chat_id: str
    candidates: Sequence[M]
    last_ts: datetime | None = None
    advance_watermark: bool = True
    new_chat: bool = False
    intent: ClaimIntent[M] | None = None
    known: CursorRead | None = None

    @property
    def usable_known(self) -> CursorRead | None:
        """``known`` unless it is unresolved."""
        known = self.known
        return known if known is not None and known.outcome is not ReadOutcome.UNRESOLVED else None

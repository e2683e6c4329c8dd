"""Fleet-safe delivery for Teams chats: claim a message in the shared cursor before pushing it.

``claim_delivery`` is the only way a replica may win a chat message. The state machine, per chat:

::

                       ┌───────────── settle: OURS → push its ids, then claim as usual
                       │              settle: LOST → forget it, then claim as usual
    UNSETTLED(write) ──┤
          ▲            └───────────── settle: UNKNOWN → UNRESOLVED (claim nothing new)
          │ the write raised and reading back could not settle it (or the call was cancelled)
          │
    READ cursor ── UNRESOLVED (failed / corrupt / no ETag) ───────────► UNRESOLVED, nothing claimed
     (or the caller's read of a moment ago: ``known``)
          │
          ├─ ABSENT or PRESENT → decide_claim → nothing claimable ────► NOTHING_NEW / LOST
          │
          └─ WRITE merged cursor (If-Match, or if_absent) ── ok ──────► CLAIMED
                      │ raised (any StorageError)
                      ▼
                 read back + decide_settle ─ OURS ────────────────────► CLAIMED
                      │                    ─ RETRY → same write again (bounded)
                      │                    ─ LOST → decide again on the fresh read (≤ 4 writes,
                      │                              then UNRESOLVED/EXHAUSTED)
                      └──────────────────── UNKNOWN → UNSETTLED, UNRESOLVED

Rules this implements (SPEC §1, §4):

* Every ambiguity claims nothing, and ``ChatClaim.may_advance`` is False: the worker keeps those
  messages as candidates and offers them again next cycle. Nothing is lost by failing closed.
* A write whose outcome is unknown is settled by reading back, using the claim id recorded in the
  cursor's ``claims`` list. When that cannot be answered now, the write is remembered *before* it
  is sent (write-ahead, so a cancelled call is covered too) and settled first on the next call for
  that chat. If it turns out ours, its ids are returned then, and pushed exactly once; without this,
  a write that committed while its response was lost would leave the ids recorded as claimed with
  nobody pushing them.
* The memory of unsettled writes lives in this replica only; a restart before one settles loses
  that batch (the messages stay readable through the read tools), as for email.

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

import asyncio
import logging
import uuid
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar
from datetime import datetime
from enum import Enum

from opentelemetry import trace

from service.ledger.records.cas import Update, update_value
from service.ledger.claims.claim_intent import ClaimIntent, IntentAhead, timed_intent
from service.ledger.claims.chat_cursor import (
    Candidate,
    ChatCursor,
    apply_claim,
    CURSOR_PREFIX,
    baseline_cursor,
    chat_of_cursor_key,
    created_chat_cursor,
    cursor_key,
    decide_claim,
    parse_chat_cursor,
    render_chat_cursor,
)
from service.clock import Clock, utc_now
from service.ledger.claims.corrupt_cursors import CorruptCursors
from service.ledger.records.reads import Read, ReadOutcome, UnresolvedReason, read_parsed
from service.ledger.claims.settle import (
    SETTLE_ROUNDS,
    ClaimWrite,
    Settlement,
    settle_uncertain_write,
    write_claim,
)
from service.storage.backend import MemoryBackend
from service.telemetry.metrics import Metrics

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)

CLAIM_MAX_ATTEMPTS = 4
LEDGER = "chat"

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


_PROBLEM_OF_READ = {
    UnresolvedReason.READ_FAILED: ClaimProblem.READ_FAILED,
    UnresolvedReason.CORRUPT: ClaimProblem.CORRUPT,
    UnresolvedReason.NO_ETAG: ClaimProblem.NO_ETAG,
}


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


async def resolve_cursor(backend: MemoryBackend, chat_id: str) -> CursorRead:
    """The chat's cursor as PRESENT, ABSENT or UNRESOLVED (only ABSENT may treat the chat as new)."""
    return await read_parsed(backend, cursor_key(chat_id), parse_chat_cursor)


def _new_claim_id() -> str:
    return uuid.uuid4().hex


@dataclass
class _ClaimRun(Generic[M]):
    """The shell's bookkeeping for one call; every decision is made by the pure core."""

    backend: MemoryBackend
    chat_id: str
    unsettled: MutableMapping[str, UnsettledChatClaim[M]]
    settle_rounds: int
    metrics: Metrics | None = None
    carried: tuple[M, ...] = ()
    settled: Settlement | None = None
    writes: int = 0

    def result(
        self, outcome: ChatClaimOutcome, won: Sequence[M] = (), problem: ClaimProblem | None = None
    ) -> ChatClaim[M]:
        return ChatClaim(
            self.chat_id,
            outcome,
            won=(*self.carried, *won),
            problem=problem,
            settled=self.settled,
            writes=self.writes,
        )

    def record_settle(self, settlement: Settlement) -> None:
        if self.metrics is not None:
            self.metrics.chat_settle.labels(outcome=settlement.value).inc()

    async def read_back(self) -> CursorRead:
        return await resolve_cursor(self.backend, self.chat_id)

    async def settle_earlier(self) -> CursorRead | None:
        """Settle a remembered write first (sets ``settled``); return its read-back when reusable."""
        pending = self.unsettled.get(self.chat_id)
        if pending is None:
            return None
        result = await settle_uncertain_write(
            self.backend, pending.write, self.read_back, rounds=self.settle_rounds
        )
        self.settled = result.settlement
        self.record_settle(result.settlement)
        self.writes += result.writes
        if result.settlement is Settlement.UNKNOWN:
            return None
        del self.unsettled[self.chat_id]
        if result.settlement is Settlement.OURS:
            self.carried = pending.messages
            log.info(
                "earlier claim on chat %s settled as ours: %d message(s) to push",
                self.chat_id,
                len(pending.messages),
            )
        return result.read


async def claim_delivery(
    backend: MemoryBackend,
    chat_id: str,
    candidates: Sequence[M],
    last_ts: datetime | None = None,
    *,
    unsettled: MutableMapping[str, UnsettledChatClaim[M]],
    clock: Clock = utc_now,
    metrics: Metrics | None = None,
    max_attempts: int = CLAIM_MAX_ATTEMPTS,
    settle_rounds: int = SETTLE_ROUNDS,
    new_claim_id: Callable[[], str] = _new_claim_id,
    advance_watermark: bool = True,
    new_chat: bool = False,
    intent: ClaimIntent[M] | None = None,
    known: CursorRead | None = None,
) -> ChatClaim[M]:
    """Claim ``candidates`` for this replica (see the module docstring for the whole contract).

    ``advance_watermark=False``: the candidates lie beyond a message this replica cannot take (a
    sponsor wait's reply after someone else's message); the watermark moves only to ``last_ts``.

    ``new_chat=True``: a first sight's claim, valid only while the chat has no cursor. A first sight
    offers the newest message alone and moves the watermark to it, which is right only for a chat
    the fleet has never seen; once some replica has written a cursor, the messages between its
    watermark and the newest may be unclaimed, so nothing is claimed (NOTHING_NEW: read the
    cursor and poll as usual).

    ``unsettled`` is this replica's memory of claim writes whose outcome is unknown, keyed by chat;
    pass the same mapping on every call (``ChatLedger`` holds one).

    ``intent`` is told what each write will win before it is sent (and may veto it), and how it settled.

    ``known``: the cursor as the caller read it a moment ago (before reading the chat from Graph): the
    claim decides on it and writes against its ETag instead of reading the cursor again. A read that is
    stale by then costs a failed compare-and-swap, after which the claim reads and decides afresh, as
    after any lost race; an unresolved one is not used.
    """
    with tracer.start_as_current_span("ledger.claim_delivery") as span:
        span.set_attribute("entrabot.chat_id", chat_id)
        span.set_attribute("entrabot.candidates", len(candidates))
        run: _ClaimRun[M] = _ClaimRun(backend, chat_id, unsettled, settle_rounds, metrics)
        usable = (
            known if known is not None and known.outcome is not ReadOutcome.UNRESOLVED else None
        )
        span.set_attribute("entrabot.claim.cursor_known", usable is not None)
        claim = await _claim(
            run,
            candidates,
            last_ts,
            clock,
            metrics,
            max_attempts,
            new_claim_id,
            advance_watermark,
            new_chat,
            intent,
            usable,
        )
        span.set_attribute("entrabot.claim.outcome", claim.outcome.value)
        span.set_attribute("entrabot.claim.ids", len(claim.ids))
        span.set_attribute("entrabot.claim.writes", claim.writes)
        if metrics is not None:
            metrics.claims.labels(ledger=LEDGER, outcome=claim.outcome.value).inc()
            metrics.chat_unsettled.set(len(unsettled))
            if claim.ids:
                metrics.claimed_messages.labels(ledger=LEDGER).inc(len(claim.ids))
        if claim.problem is not None:
            log.warning(
                "claim on chat %s unresolved (%s): nothing new claimed",
                chat_id,
                claim.problem.value,
            )
        return claim


async def _claim(
    run: _ClaimRun[M],
    candidates: Sequence[M],
    last_ts: datetime | None,
    clock: Clock,
    metrics: Metrics | None,
    max_attempts: int,
    new_claim_id: Callable[[], str],
    advance_watermark: bool = True,
    new_chat: bool = False,
    intent: ClaimIntent[M] | None = None,
    known: CursorRead | None = None,
) -> ChatClaim[M]:
    earlier = await run.settle_earlier()
    if run.settled is Settlement.UNKNOWN:
        return run.result(ChatClaimOutcome.UNRESOLVED, problem=ClaimProblem.UNSETTLED)
    if not candidates:
        return run.result(ChatClaimOutcome.NOTHING_NEW)
    # decide_claim orders the distinct candidates; each is mapped back to the message it names.
    offered = {m.candidate.id: m for m in reversed(candidates)}  # the first of an id wins, as there
    ahead: IntentAhead[M] | None = None
    if earlier is not None:
        read = earlier
    elif known is not None:
        read = known  # the intent, if any, follows the decision: the read costs nothing here
    elif intent is None:
        read = await run.read_back()
    else:
        ahead = IntentAhead(intent, new_claim_id(), frozenset(offered))
        read = await ahead.beside(run.read_back(), tuple(offered.values()), metrics)
    attempts = 0
    while True:
        if read.outcome is ReadOutcome.UNRESOLVED:
            assert read.reason is not None
            await _drop(ahead)
            return run.result(ChatClaimOutcome.UNRESOLVED, problem=_PROBLEM_OF_READ[read.reason])
        if new_chat and read.value is not None:
            await _drop(ahead)
            return run.result(
                ChatClaimOutcome.NOTHING_NEW
            )  # no longer new: another replica's cursor rules
        decision = decide_claim(read.value, [m.candidate for m in candidates])
        if not decision.claimable:
            await _drop(ahead)
            return run.result(ChatClaimOutcome.LOST)
        if attempts == max_attempts:
            await _drop(ahead)
            return run.result(ChatClaimOutcome.UNRESOLVED, problem=ClaimProblem.EXHAUSTED)
        attempts += 1
        won = tuple(offered[c.id] for c in decision.claimable)
        if ahead is not None and ahead.covers([c.id for c in decision.claimable]):
            claim_id = ahead.claim_id
            if not ahead.written:
                return run.result(ChatClaimOutcome.UNRESOLVED, problem=ClaimProblem.INTENT_FAILED)
        else:
            await _drop(ahead)
            claim_id = new_claim_id()
            if intent is not None and not await timed_intent(intent, claim_id, won, metrics):
                return run.result(ChatClaimOutcome.UNRESOLVED, problem=ClaimProblem.INTENT_FAILED)
        ahead = None  # its claim id is this write's: settled by after_write below
        cursor = apply_claim(
            read.value,
            decision.claimable,
            claim_id=claim_id,
            now=clock(),
            seen_up_to=last_ts,
            advance=advance_watermark,
        )
        write = ClaimWrite(cursor_key(run.chat_id), render_chat_cursor(cursor), read.etag, claim_id)
        # Remembered before it is sent: if this call dies mid-write, the next one settles it.
        run.unsettled[run.chat_id] = UnsettledChatClaim(write, won)
        result = await write_claim(run.backend, write, run.read_back, rounds=run.settle_rounds)
        run.writes += result.writes
        if result.failed:
            run.record_settle(result.settlement)
        if result.conflicted and metrics is not None:
            metrics.cas_conflicts.labels(ledger=LEDGER).inc()
        if result.settlement is Settlement.UNKNOWN:
            return run.result(ChatClaimOutcome.UNRESOLVED, problem=ClaimProblem.UNKNOWN_OUTCOME)
        del run.unsettled[run.chat_id]
        if intent is not None:
            await intent.after_write(claim_id, result.settlement is Settlement.OURS)
        if result.settlement is Settlement.OURS:
            return run.result(ChatClaimOutcome.CLAIMED, won)
        assert result.read is not None  # LOST is always decided on a read
        read = result.read


async def _drop(ahead: IntentAhead[M] | None) -> None:
    if ahead is not None:
        await ahead.drop()


async def bootstrap_cursor(
    backend: MemoryBackend,
    chat_id: str,
    seen: Sequence[Candidate],
    *,
    clock: Clock = utc_now,
    metrics: Metrics | None = None,
) -> Update[ChatCursor]:
    """First sight without a delivery: create the cursor at the newest seen message (if_absent).

    Only a chat whose cursor read ABSENT may be bootstrapped; an existing cursor is never touched
    (ALREADY), so a replica that lost the race to a delivering sibling cannot move its watermark.
    """
    return await _create_cursor(backend, chat_id, baseline_cursor(seen, now=clock()), metrics)


async def start_created_chat_cursor(
    backend: MemoryBackend,
    chat_id: str,
    newest: Candidate | None,
    *,
    clock: Clock = utc_now,
    metrics: Metrics | None = None,
) -> Update[ChatCursor]:
    """Record, for the whole fleet, that ``create_chat`` made this chat: its newest message (``newest``,
    None for an empty chat) surfaces whatever its age (see ``created_chat_cursor``).

    Created only where no cursor exists (if_absent): a chat some replica has already seen keeps the
    fleet's cursor, as it would on this replica alone.
    """
    return await _create_cursor(backend, chat_id, created_chat_cursor(newest, now=clock()), metrics)


async def _create_cursor(
    backend: MemoryBackend, chat_id: str, cursor: ChatCursor, metrics: Metrics | None
) -> Update[ChatCursor]:
    text = render_chat_cursor(cursor)
    return await update_value(
        backend,
        cursor_key(chat_id),
        parse=parse_chat_cursor,
        change=lambda current: text if current is None else None,
        attempts=2,
        ledger=LEDGER,
        metrics=metrics,
    )


class ChatLedger(Generic[M]):
    """The per-replica face of the chat ledger: one backend, one memory of unsettled writes (and of the
    messages each would win)."""

    def __init__(
        self,
        backend: MemoryBackend,
        *,
        clock: Clock = utc_now,
        metrics: Metrics | None = None,
        corrupt: CorruptCursors | None = None,
    ) -> None:
        self._backend = backend
        # Chats stalled by a corrupt cursor, made visible (metric, /readyz) until repaired.
        self.corrupt = corrupt if corrupt is not None else CorruptCursors(metrics)
        self._clock = clock
        self._metrics = metrics
        self._unsettled: dict[str, UnsettledChatClaim[M]] = {}
        # One claim per chat at a time: two concurrent calls would overwrite each other's memory
        # of an unsettled write.
        self._chat_locks: dict[str, asyncio.Lock] = {}

    @property
    def unsettled_chats(self) -> frozenset[str]:
        return frozenset(self._unsettled)

    async def resolve(self, chat_id: str) -> CursorRead:
        read = await resolve_cursor(self._backend, chat_id)
        self.corrupt.observe(chat_id, read)
        return read

    async def chats_with_cursors(self) -> frozenset[str]:
        """Every chat some replica has made its first sight of (its cursor exists, readable or not):
        one listing, a call per 5,000 chats on Blob, instead of a read per chat. Raises StorageError."""
        return frozenset(
            c
            for key in await self._backend.list(CURSOR_PREFIX)
            if (c := chat_of_cursor_key(key)) is not None
        )

    async def claim(
        self,
        chat_id: str,
        candidates: Sequence[M],
        last_ts: datetime | None = None,
        *,
        advance_watermark: bool = True,
        new_chat: bool = False,
        intent: ClaimIntent[M] | None = None,
        known: CursorRead | None = None,
    ) -> ChatClaim[M]:
        async with self._chat_locks.setdefault(chat_id, asyncio.Lock()):
            claim = await claim_delivery(
                self._backend,
                chat_id,
                candidates,
                last_ts,
                unsettled=self._unsettled,
                clock=self._clock,
                metrics=self._metrics,
                advance_watermark=advance_watermark,
                new_chat=new_chat,
                intent=intent,
                known=known,
            )
        if claim.problem is ClaimProblem.CORRUPT:
            self.corrupt.mark(chat_id)
        elif claim.outcome in (ChatClaimOutcome.CLAIMED, ChatClaimOutcome.LOST):
            self.corrupt.clear(chat_id)  # decided on a cursor that parsed
        return claim

    async def bootstrap(self, chat_id: str, seen: Sequence[Candidate]) -> Update[ChatCursor]:
        return await bootstrap_cursor(
            self._backend, chat_id, seen, clock=self._clock, metrics=self._metrics
        )

    async def start_created_chat(
        self, chat_id: str, newest: Candidate | None
    ) -> Update[ChatCursor]:
        return await start_created_chat_cursor(
            self._backend, chat_id, newest, clock=self._clock, metrics=self._metrics
        )

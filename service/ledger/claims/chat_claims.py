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

What a claim asks and what it gets back: ``chat_claim_types``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Generic

from opentelemetry import trace

from service.ledger.claims.claim_intent import IntentAhead, timed_intent
from service.ledger.claims.chat_claim_types import (
    ChatClaim,
    ChatClaimOutcome,
    ClaimProblem,
    ClaimRequest,
    CursorRead,
    M,
    UnsettledChatClaim,
)
from service.ledger.claims.chat_cursor import (
    ClaimDecision,
    apply_claim,
    decide_claim,
    parse_chat_cursor,
    render_chat_cursor,
)
from service.clock import Clock, utc_now
from service.domain.conversation import ConversationKind
from service.ledger.records.reads import ReadOutcome, UnresolvedReason, read_parsed
from service.ledger.claims.settle import (
    SETTLE_ROUNDS,
    ClaimWrite,
    Settlement,
    settle_uncertain_write,
    write_claim,
)
from service.storage.backend import MemoryBackend
from service.telemetry.metrics import LedgerMetrics

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)

CLAIM_MAX_ATTEMPTS = 4
LEDGER = "chat"

_PROBLEM_OF_READ = {
    UnresolvedReason.READ_FAILED: ClaimProblem.READ_FAILED,
    UnresolvedReason.CORRUPT: ClaimProblem.CORRUPT,
    UnresolvedReason.NO_ETAG: ClaimProblem.NO_ETAG,
}


async def resolve_cursor(
    backend: MemoryBackend, kind: ConversationKind, chat_id: str
) -> CursorRead:
    """The conversation's cursor as PRESENT, ABSENT or UNRESOLVED (only ABSENT may treat it as new)."""
    return await read_parsed(backend, kind.cursor_key(chat_id), parse_chat_cursor)


def _new_claim_id() -> str:
    return uuid.uuid4().hex


@dataclass
class _ClaimRun(Generic[M]):
    """The shell's bookkeeping for one call; every decision is made by the pure core."""

    backend: MemoryBackend
    kind: ConversationKind
    chat_id: str
    unsettled: MutableMapping[str, UnsettledChatClaim[M]]
    settle_rounds: int
    metrics: LedgerMetrics
    clock: Clock
    max_attempts: int
    new_claim_id: Callable[[], str]
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
        self.metrics.chat_settle.labels(outcome=settlement.value).inc()

    async def read_back(self) -> CursorRead:
        return await resolve_cursor(self.backend, self.kind, self.chat_id)

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
    request: ClaimRequest[M],
    *,
    kind: ConversationKind,
    unsettled: MutableMapping[str, UnsettledChatClaim[M]],
    clock: Clock = utc_now,
    metrics: LedgerMetrics,
    new_claim_id: Callable[[], str] = _new_claim_id,
) -> ChatClaim[M]:
    """Claim ``request.candidates`` for this replica (see the module docstring for the whole contract).

    ``unsettled`` is this replica's memory of claim writes whose outcome is unknown, keyed by chat;
    pass the same mapping on every call (``ChatLedger`` holds one).
    """
    chat_id = request.chat_id
    with tracer.start_as_current_span("ledger.claim_delivery") as span:
        span.set_attribute("entrabot.chat_id", chat_id)
        span.set_attribute("entrabot.candidates", len(request.candidates))
        run: _ClaimRun[M] = _ClaimRun(
            backend,
            kind,
            chat_id,
            unsettled,
            SETTLE_ROUNDS,
            metrics,
            clock,
            CLAIM_MAX_ATTEMPTS,
            new_claim_id,
        )
        span.set_attribute("entrabot.claim.cursor_known", request.usable_known is not None)
        claim = await _claim(run, request)
        span.set_attribute("entrabot.claim.outcome", claim.outcome.value)
        span.set_attribute("entrabot.claim.ids", len(claim.ids))
        span.set_attribute("entrabot.claim.writes", claim.writes)
        metrics.claims.labels(ledger=kind.name, outcome=claim.outcome.value).inc()
        metrics.chat_unsettled.set(len(unsettled))
        if claim.ids:
            metrics.claimed_messages.labels(ledger=kind.name).inc(len(claim.ids))
        if claim.problem is not None:
            log.warning(
                "claim on chat %s unresolved (%s): nothing new claimed",
                chat_id,
                claim.problem.value,
            )
        return claim


async def _claim(run: _ClaimRun[M], request: ClaimRequest[M]) -> ChatClaim[M]:
    earlier = await run.settle_earlier()
    if run.settled is Settlement.UNKNOWN:
        return run.result(ChatClaimOutcome.UNRESOLVED, problem=ClaimProblem.UNSETTLED)
    if not request.candidates:
        return run.result(ChatClaimOutcome.NOTHING_NEW)
    # decide_claim orders the distinct candidates; each is mapped back to the message it names.
    offered = {m.candidate.id: m for m in reversed(request.candidates)}  # the first of an id wins
    ahead: IntentAhead[M] | None = None
    known = request.usable_known
    if earlier is not None:
        read = earlier
    elif known is not None:
        read = known  # the intent, if any, follows the decision: the read costs nothing here
    elif request.intent is None:
        read = await run.read_back()
    else:
        ahead = IntentAhead(request.intent, run.new_claim_id(), frozenset(offered))
        read = await ahead.beside(run.read_back(), tuple(offered.values()), run.metrics)
    attempts = 0
    while True:
        decided = _decide(run, request, read, attempts)
        if isinstance(decided, ChatClaim):
            await _drop(ahead)
            return decided
        attempts += 1
        won = tuple(offered[c.id] for c in decided.claimable)
        claim_id = await _claim_id(run, request, ahead, decided, won)
        if claim_id is None:
            return run.result(ChatClaimOutcome.UNRESOLVED, problem=ClaimProblem.INTENT_FAILED)
        ahead = None  # its claim id is this write's: settled by after_write in _write
        written = await _write(run, request, read, decided, claim_id, won)
        if isinstance(written, ChatClaim):
            return written
        read = written  # LOST: decide again on the fresh read


def _decide(
    run: _ClaimRun[M], request: ClaimRequest[M], read: CursorRead, attempts: int
) -> ChatClaim[M] | ClaimDecision:
    """What to write on ``read``, or the claim's end when nothing may be written."""
    if read.outcome is ReadOutcome.UNRESOLVED:
        assert read.reason is not None
        return run.result(ChatClaimOutcome.UNRESOLVED, problem=_PROBLEM_OF_READ[read.reason])
    if request.new_chat and read.value is not None:
        return run.result(
            ChatClaimOutcome.NOTHING_NEW
        )  # no longer new: another replica's cursor rules
    decision = decide_claim(read.value, [m.candidate for m in request.candidates])
    if not decision.claimable:
        return run.result(ChatClaimOutcome.LOST)
    if attempts == run.max_attempts:
        return run.result(ChatClaimOutcome.UNRESOLVED, problem=ClaimProblem.EXHAUSTED)
    return decision


async def _claim_id(
    run: _ClaimRun[M],
    request: ClaimRequest[M],
    ahead: IntentAhead[M] | None,
    decision: ClaimDecision,
    won: tuple[M, ...],
) -> str | None:
    """The write's claim id, its intent taken first; None when the intent failed (write nothing)."""
    if ahead is not None and ahead.covers([c.id for c in decision.claimable]):
        return ahead.claim_id if ahead.written else None
    await _drop(ahead)
    claim_id = run.new_claim_id()
    if request.intent is not None and not await timed_intent(
        request.intent, claim_id, won, run.metrics
    ):
        return None
    return claim_id


async def _write(
    run: _ClaimRun[M],
    request: ClaimRequest[M],
    read: CursorRead,
    decision: ClaimDecision,
    claim_id: str,
    won: tuple[M, ...],
) -> ChatClaim[M] | CursorRead:
    """Send one claim write and settle it: the claim's end, or the read a LOST write was decided on."""
    cursor = apply_claim(
        read.value,
        decision.claimable,
        claim_id=claim_id,
        now=run.clock(),
        seen_up_to=request.last_ts,
        advance=request.advance_watermark,
    )
    write = ClaimWrite(
        run.kind.cursor_key(run.chat_id), render_chat_cursor(cursor), read.etag, claim_id
    )
    # Remembered before it is sent: if this call dies mid-write, the next one settles it.
    run.unsettled[run.chat_id] = UnsettledChatClaim(write, won)
    result = await write_claim(run.backend, write, run.read_back, rounds=run.settle_rounds)
    run.writes += result.writes
    if result.failed:
        run.record_settle(result.settlement)
    if result.conflicted:
        run.metrics.cas_conflicts.labels(ledger=run.kind.name).inc()
    if result.settlement is Settlement.UNKNOWN:
        return run.result(ChatClaimOutcome.UNRESOLVED, problem=ClaimProblem.UNKNOWN_OUTCOME)
    del run.unsettled[run.chat_id]
    if request.intent is not None:
        await request.intent.after_write(claim_id, result.settlement is Settlement.OURS)
    if result.settlement is Settlement.OURS:
        return run.result(ChatClaimOutcome.CLAIMED, won)
    assert result.read is not None  # LOST is always decided on a read
    return result.read


async def _drop(ahead: IntentAhead[M] | None) -> None:
    if ahead is not None:
        await ahead.drop()

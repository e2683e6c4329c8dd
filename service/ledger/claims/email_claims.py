"""Fleet-safe delivery for mail: the claim → settle → hold protocol of the email cursor.

One ``EmailClaimer`` per replica runs one cycle per email poll. Its state is explicit:

* ``IDLE`` — no claim in doubt.
* ``HOLDING(batch, claim)`` — a claim write whose outcome is unknown; the batch waits in memory.

A cycle, every branch a named ``EmailCycleOutcome``:

1. HOLDING: settle first (read back, ``decide_settle``). UNKNOWN → stay HOLDING and stop: no Graph
   call, and the only cursor write allowed is the resend of that same claim (same content, same
   If-Match) on RETRY. OURS → deliver the held batch; LOST → drop it (another write landed first,
   so ours can never commit). Either way the hold clears and the cycle carries on.
2. Read the cursor. UNRESOLVED → SKIPPED_UNREADABLE: no Graph call, no initialization, no local
   fallback. ABSENT → initialize it with if_absent: at "now" on a cloud backend; on a local backend
   adopting the legacy ``email_cursor.txt`` once (that file stays in place). The first cycle after
   initialization fetches. ``start_cursor`` does this step alone, for a replica that has no
   delivery target yet: the cursor starts at the container's first boot, not at the first host.
3. Fetch mail newer than the cursor. Nothing newer → NOTHING_NEW.
4. Claim: write the advanced cursor (newest time, our claim id first among the last 32) with
   If-Match, *before* anything is pushed. The batch is held before the write is sent, so a call
   cancelled mid-write settles next cycle like any other unknown outcome.
5. The write succeeded → CLAIMED, deliver. It failed → settle: OURS → CLAIMED; LOST → LOST (drop the
   batch, push nothing); UNKNOWN → HOLDING.

Anything that raises after step 1 (the mailbox fetch: a 429, a 5xx, a timeout, an unreadable mail)
ends the cycle as FAILED with the exception in ``EmailCycle.error``, never as a raise: by then a held
batch may have settled as ours, the cursor has moved past it, and raising would lose it for good.

Losing a race drops a batch, not the mail: the winner's cursor moved only to the newest mail *it*
claimed, so whatever the loser saw beyond it is still newer than the cursor and is fetched by a
later cycle. A held batch lives only in memory: a restart before it settles loses it (the mail
stays readable through ``read_email``).

``EmailCycle.deliver`` is what the worker pushes, whatever the outcome (a batch settled as ours is
delivered even when the rest of the cycle is skipped).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Generic

from opentelemetry import trace

from service.clock import Clock, utc_now
from service.ledger.claims.claim_intent import ClaimIntent
from service.ledger.claims.email_cursor import (
    EMAIL_CURSOR_KEY,
    LEGACY_EMAIL_CURSOR_KEY,
    EmailCursor,
    M,
    advance,
    initial_cursor,
    new_mail,
    parse_email_cursor,
    render_email_cursor,
)
from service.ledger.records.reads import Read, ReadOutcome, UnresolvedReason, read_parsed
from service.ledger.claims.settle import (
    SETTLE_ROUNDS,
    ClaimWrite,
    ClaimWriteResult,
    Settlement,
    settle_uncertain_write,
    write_claim,
)
from service.storage.backend import MemoryBackend
from service.storage.errors import ConcurrencyError, StorageError
from service.telemetry.metrics import LedgerMetrics

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)

LEDGER = "email"

# Fetches mail received strictly after the given time: the OLDEST ones first, at most one page, so
# that claiming up to the newest of them skips nothing in between.
MailFetcher = Callable[[datetime], Awaitable[Sequence[M]]]


class EmailState(str, Enum):
    IDLE = "idle"
    HOLDING = "holding"


class EmailCycleOutcome(str, Enum):
    SKIPPED_UNREADABLE = "skipped_unreadable"  # cursor (or legacy cursor) unreadable: no Graph call
    INTENT_FAILED = (
        "intent_failed"  # the host's delivery record did not take the intent: nothing claimed
    )
    INITIALIZED = "initialized"  # the missing cursor was created by us
    INIT_LOST = "init_lost"  # another replica created it first
    INIT_UNSETTLED = (
        "init_unsettled"  # the create failed or its outcome is unknown; read again next cycle
    )
    NOTHING_NEW = "nothing_new"
    CLAIMED = "claimed"
    LOST = "lost"  # another replica's claim landed first: batch dropped
    HOLDING = "holding"  # a claim is unsettled: its batch is held, nothing fetched or pushed
    FAILED = (
        "failed"  # the cycle raised after settling (see ``EmailCycle.error``); nothing new claimed
    )


class CursorStart(str, Enum):
    """What ``EmailClaimer.start_cursor`` found."""

    PRESENT = "present"  # there already, or another replica created it just now
    CREATED = "created"
    UNKNOWN = "unknown"  # unreadable, or the create's outcome is unknown: ask again next cycle


_STARTED = {
    EmailCycleOutcome.INITIALIZED: CursorStart.CREATED,
    EmailCycleOutcome.INIT_LOST: CursorStart.PRESENT,
}


@dataclass(frozen=True)
class HeldClaim(Generic[M]):
    write: ClaimWrite
    batch: tuple[M, ...]


@dataclass(frozen=True)
class EmailCycle(Generic[M]):
    outcome: EmailCycleOutcome
    deliver: tuple[M, ...] = ()  # push these, whatever the outcome
    settled: Settlement | None = None  # how a held claim settled at the start of the cycle
    fetched: bool = False  # whether the mailbox was asked
    error: Exception | None = (
        None  # FAILED: what the cycle raised, for the caller to report or re-raise
    )


def _new_claim_id() -> str:
    return uuid.uuid4().hex


async def read_email_cursor(backend: MemoryBackend) -> Read[EmailCursor]:
    return await read_parsed(backend, EMAIL_CURSOR_KEY, parse_email_cursor)


class EmailClaimer(Generic[M]):
    """The email claim state machine for one replica (see the module docstring)."""

    def __init__(
        self,
        backend: MemoryBackend,
        *,
        is_cloud: bool,
        clock: Clock = utc_now,
        metrics: LedgerMetrics,
        settle_rounds: int = SETTLE_ROUNDS,
        new_claim_id: Callable[[], str] = _new_claim_id,
    ) -> None:
        self._backend = backend
        self._is_cloud = is_cloud
        self._clock = clock
        self._metrics = metrics
        self._settle_rounds = settle_rounds
        self._new_claim_id = new_claim_id
        self._held: HeldClaim[M] | None = None
        self._cycle_lock = asyncio.Lock()  # one cycle at a time: the hold is a single slot

    @property
    def state(self) -> EmailState:
        return EmailState.IDLE if self._held is None else EmailState.HOLDING

    @property
    def held(self) -> HeldClaim[M] | None:
        return self._held

    async def start_cursor(self) -> CursorStart:
        """Create the cursor if it is missing, as a first cycle would, without asking the mailbox.

        The seed starts the cursor "on a container's first boot" (storage-and-memory, "Poll state"), so
        mail that arrives before any host connects is pushed once one does. Nothing is claimed, so a
        replica with no delivery target may do this.
        """
        async with self._cycle_lock:
            read = await read_email_cursor(self._backend)
            if read.outcome is ReadOutcome.PRESENT:
                return CursorStart.PRESENT
            if read.outcome is ReadOutcome.UNRESOLVED:
                log.warning(
                    "email cursor unreadable (%s); creating it is tried again next cycle", read.why
                )
                return CursorStart.UNKNOWN
            return _STARTED.get(await self._initialize(), CursorStart.UNKNOWN)

    async def run_cycle(
        self, fetch: MailFetcher[M], intent: ClaimIntent[M] | None = None
    ) -> EmailCycle[M]:
        """One poll: settle, read, fetch, claim. ``fetch(since)`` is called at most once; ``intent`` is
        told what the claim write will win before it is sent (and may veto it), and how it settled."""
        async with self._cycle_lock:
            return await self._traced_cycle(fetch, intent)

    async def _traced_cycle(
        self, fetch: MailFetcher[M], intent: ClaimIntent[M] | None
    ) -> EmailCycle[M]:
        with tracer.start_as_current_span("ledger.email_cycle") as span:
            cycle = await self._cycle(fetch, intent)
            span.set_attribute("entrabot.email.outcome", cycle.outcome.value)
            span.set_attribute("entrabot.email.deliver", len(cycle.deliver))
            if cycle.settled is not None:
                span.set_attribute("entrabot.email.settled", cycle.settled.value)
            # Set once per cycle, so a claim in flight never shows as a hold.
            self._metrics.email_hold.set(0 if self._held is None else 1)
            self._metrics.claims.labels(ledger=LEDGER, outcome=cycle.outcome.value).inc()
            if cycle.deliver:
                self._metrics.claimed_messages.labels(ledger=LEDGER).inc(len(cycle.deliver))
            return cycle

    # --- the cycle ---

    async def _cycle(self, fetch: MailFetcher[M], intent: ClaimIntent[M] | None) -> EmailCycle[M]:
        settled: Settlement | None = None
        delivered: tuple[M, ...] = ()
        if self._held is not None:
            held = self._held
            settling = await settle_uncertain_write(
                self._backend, held.write, self._read_back, rounds=self._settle_rounds
            )
            settled = settling.settlement
            self._record_settle(settled)
            if settled is Settlement.UNKNOWN:
                log.warning(
                    "email claim still unsettled; holding %d mail(s), no mailbox call this cycle",
                    len(held.batch),
                )
                return EmailCycle(EmailCycleOutcome.HOLDING, settled=settled)
            self._held = None
            if settled is Settlement.OURS:
                delivered = held.batch
            log.info("held email claim settled as %s", settled.value)

        def done(
            outcome: EmailCycleOutcome, new: tuple[M, ...] = (), *, fetched: bool = False
        ) -> EmailCycle[M]:
            return EmailCycle(outcome, (*delivered, *new), settled, fetched)

        try:
            return await self._claim_new(fetch, done, intent)
        except Exception as exc:  # noqa: BLE001 - handed to the caller with the settled batch, never swallowed
            return EmailCycle(EmailCycleOutcome.FAILED, delivered, settled, error=exc)

    async def _claim_new(
        self,
        fetch: MailFetcher[M],
        done: Callable[..., EmailCycle[M]],
        intent: ClaimIntent[M] | None = None,
    ) -> EmailCycle[M]:
        """Steps 2-5 of the cycle: read the cursor, fetch, claim (``done`` adds the settled batch)."""
        read = await read_email_cursor(self._backend)
        if read.outcome is ReadOutcome.UNRESOLVED:
            log.warning("email cursor unreadable (%s); skipping this cycle", read.why)
            return done(EmailCycleOutcome.SKIPPED_UNREADABLE)
        if read.outcome is ReadOutcome.ABSENT:
            return done(await self._initialize())
        assert read.value is not None and read.etag is not None
        batch = new_mail(read.value, await fetch(read.value.ts))
        if not batch:
            return done(EmailCycleOutcome.NOTHING_NEW, fetched=True)
        claim_id = self._new_claim_id()
        content = render_email_cursor(advance(read.value, batch, claim_id))
        held = HeldClaim(ClaimWrite(EMAIL_CURSOR_KEY, content, read.etag, claim_id), batch)
        if intent is not None and not await intent.before_write(claim_id, batch):
            log.warning(
                "email claim not written: the host's delivery record did not take its intent"
            )
            return done(EmailCycleOutcome.INTENT_FAILED, fetched=True)
        self._held = held  # before the write is sent: a cancelled call settles next cycle
        result: ClaimWriteResult[EmailCursor] = await write_claim(
            self._backend, held.write, self._read_back, rounds=self._settle_rounds
        )
        if result.conflicted:
            self._metrics.cas_conflicts.labels(ledger=LEDGER).inc()
        if result.failed:
            self._record_settle(result.settlement)
        if result.settlement is Settlement.UNKNOWN:
            log.warning(
                "email claim outcome unknown; holding %d mail(s) until it settles", len(batch)
            )
            return done(EmailCycleOutcome.HOLDING, fetched=True)
        self._held = None
        if intent is not None:
            await intent.after_write(claim_id, result.settlement is Settlement.OURS)
        if result.settlement is Settlement.OURS:
            return done(EmailCycleOutcome.CLAIMED, batch, fetched=True)
        return done(EmailCycleOutcome.LOST, fetched=True)

    async def _initialize(self) -> EmailCycleOutcome:
        legacy: EmailCursor | None = None
        if not self._is_cloud:
            read = await read_parsed(self._backend, LEGACY_EMAIL_CURSOR_KEY, parse_email_cursor)
            if (
                read.outcome is ReadOutcome.UNRESOLVED
                and read.reason is not UnresolvedReason.CORRUPT
            ):
                log.warning(
                    "legacy %s unreadable (%s); skipping this cycle",
                    LEGACY_EMAIL_CURSOR_KEY,
                    read.why,
                )
                return EmailCycleOutcome.SKIPPED_UNREADABLE
            if read.outcome is ReadOutcome.UNRESOLVED:
                log.warning(
                    "legacy %s is not a cursor; the email cursor starts now",
                    LEGACY_EMAIL_CURSOR_KEY,
                )
            legacy = read.value
        cursor = initial_cursor(self._clock(), legacy)
        try:
            await self._backend.write_text(
                EMAIL_CURSOR_KEY, render_email_cursor(cursor), if_absent=True
            )
        except ConcurrencyError:
            return EmailCycleOutcome.INIT_LOST
        except StorageError as exc:
            log.warning(
                "creating the email cursor failed (%s); reading it again next cycle",
                type(exc).__name__,
            )
            return EmailCycleOutcome.INIT_UNSETTLED
        if legacy is not None:
            log.info(
                "email cursor adopted from legacy %s (that file stays in place)",
                LEGACY_EMAIL_CURSOR_KEY,
            )
        else:
            log.info("email cursor initialized at now; earlier mail is not pushed")
        return EmailCycleOutcome.INITIALIZED

    # --- state ---

    async def _read_back(self) -> Read[EmailCursor]:
        return await read_email_cursor(self._backend)

    def _record_settle(self, settlement: Settlement) -> None:
        self._metrics.email_settle.labels(outcome=settlement.value).inc()

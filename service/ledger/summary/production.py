"""Producing each day's summary once per fleet and mailing it to the sponsors once: the shell around
``summary_claim``'s states (the table there).

1. ``summaries/<day>.json`` is created with if_absent as ``claimed``, holding an owner id, the counts and
   the send id the mail will carry. Creating it is the claim; a replica that finds it there does nothing
   unless it is stale (step 4).
2. The owner writes ``summaries/<day>.html`` (if_absent: a copy left by a crashed owner is kept).
3. With a mailer: the owner moves the claim to ``mailing`` (If-Match, recording the recipients and the
   subject), and only then sends the page to the sponsors; Graph's lost answers are settled in Sent Items by
   the mailer. Then ``mailed``. Without a mailer, or with nobody to mail: straight to ``done``.
4. Recovery: a claim whose state has not moved for a lease (10 minutes) is taken over by whichever replica
   next finds it, with If-Match on the stale record so that only one replica takes it over. The new owner
   keeps the send id and finishes from where the record stands; taking over ``mailing`` it first looks in
   Sent Items for the send id, and sends only when the mail is provably not there.

No summary is produced for a day that ended before the container's first boot (``first_boot``): the
loop records that boot on its first run, and ``produce`` refuses such a day once it is recorded.

Sponsors not known yet (their list unread) claim nothing: the day stays unclaimed until a later run, so
no summary is ever marked finished unmailed for a passing failure. An uncertain create or takeover is
settled by reading the owner id back (``service.ledger.claims.settle``), an uncertain move by reading the record
back (``service.ledger.records.cas``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import date, timedelta
from enum import Enum

from service.clock import Clock, as_utc, utc_now
from service.ledger.records.cas import count_conflicts, update_value
from service.ledger.summary.daily import Summary, build_summary, render_html, summary_due
from service.ledger.memory.interactions import (
    Action,
    Channel,
    Direction,
    Interaction,
    InteractionLog,
)
from service.ledger.memory.promises import Promise, PromiseLedger
from service.ledger.records.reads import Read, ReadOutcome, read_parsed
from service.ledger.claims.settle import ClaimWrite, Settlement, write_claim
from service.ledger.summary.claim import (
    Step,
    SummaryClaim,
    SummaryState,
    next_step,
    parse_summary_claim,
    render_summary_claim,
    summary_keys,
)
from service.ledger.summary.first_boot import FirstBoot, ended_before
from service.ledger.summary.mailing import (
    LetterRefused,
    LetterSent,
    LetterUnknown,
    SummaryLetter,
    SummaryMailer,
    letter_subject,
)
from service.storage.backend import MemoryBackend
from service.telemetry.metrics import LedgerMetrics

log = logging.getLogger(__name__)

LEASE = timedelta(minutes=10)
LEDGER = "summary"
FOUND_ON_TAKEOVER = "found_on_takeover"  # a taker found the stale owner's mail in Sent Items


class SummaryOutcome(str, Enum):
    NOT_DUE = "not_due"
    BEFORE_FIRST_BOOT = "before_first_boot"  # the day ended before this container first booted
    PRODUCED = "produced"
    RECOVERED = "recovered"  # finished a stale claim another replica left behind
    ALREADY_DONE = "already_done"
    IN_PROGRESS = "in_progress"  # another replica holds a live claim: do nothing
    UNRESOLVED = (
        "unresolved"  # a read, a write or the mail could not be settled: a later run retries
    )


class DailySummaryProducer:
    def __init__(
        self,
        backend: MemoryBackend,
        interactions: InteractionLog,
        *,
        promises: PromiseLedger | None = None,
        mailer: SummaryMailer | None = None,
        clock: Clock = utc_now,
        lease: timedelta = LEASE,
        metrics: LedgerMetrics,
    ) -> None:
        self._backend = backend
        self._interactions = interactions
        self._promises = promises
        self._mailer = mailer
        self._clock = clock
        self._lease = lease
        self._metrics = metrics
        self._first_boot = FirstBoot(backend, clock)
        self._told_before_boot: date | None = None  # said once per day, not once a minute

    async def run_if_due(self) -> SummaryOutcome:
        # Recorded on the first run, due or not: the loop runs from start-up, so this is the first boot.
        first_boot = await self._first_boot.recorded()
        day = summary_due(self._clock())
        if day is None:
            return SummaryOutcome.NOT_DUE
        if first_boot is None:
            return SummaryOutcome.UNRESOLVED  # unreadable now: never guess that the day counts
        if ended_before(day, first_boot):
            if self._told_before_boot != day:
                self._told_before_boot = day
                log.info(
                    "daily summary %s skipped: the day ended before this container's first boot",
                    day.isoformat(),
                )
            return SummaryOutcome.BEFORE_FIRST_BOOT
        return await self.produce(day)

    async def produce(self, day: date) -> SummaryOutcome:
        first_boot = await self._first_boot.stored()
        if first_boot is not None and ended_before(day, first_boot):
            return SummaryOutcome.BEFORE_FIRST_BOOT
        outcome = await self._produce(day)
        self._metrics.claims.labels(ledger=LEDGER, outcome=outcome.value).inc()
        log.info("daily summary %s: %s", day.isoformat(), outcome.value)
        return outcome

    async def stored(self, day: date) -> Read[SummaryClaim]:
        """The stored claim of ``day`` (its state and counts), as whichever replica produced it wrote it."""
        return await self._read_claim(summary_keys(day)[0])

    async def _produce(self, day: date) -> SummaryOutcome:
        json_key, _ = summary_keys(day)
        existing = await self._read_claim(json_key)
        if existing.outcome is ReadOutcome.UNRESOLVED:
            return SummaryOutcome.UNRESOLVED
        stale = existing.value
        step = next_step(stale, self._clock(), self._lease)
        if step is Step.FINISHED:
            return SummaryOutcome.ALREADY_DONE
        if step is Step.WAIT:
            return SummaryOutcome.IN_PROGRESS
        was_mailing = stale is not None and stale.state is SummaryState.MAILING
        recipients = (
            self._mailer.recipients() if self._mailer is not None and not was_mailing else ()
        )
        if recipients is None:
            log.info("daily summary %s waits: the sponsors are not known yet", day.isoformat())
            return SummaryOutcome.UNRESOLVED
        summary = await self._build(day)
        if summary is None:
            return SummaryOutcome.UNRESOLVED
        claim = self._taken(day, summary, stale)
        write = ClaimWrite(json_key, render_summary_claim(claim), existing.etag, claim.owner)
        result = await write_claim(self._backend, write, lambda: self._read_claim(json_key))
        if result.settlement is Settlement.UNKNOWN:
            return SummaryOutcome.UNRESOLVED
        if result.settlement is Settlement.LOST:
            other = result.read.value if result.read is not None else None
            return (
                SummaryOutcome.ALREADY_DONE
                if other is not None and other.finished
                else SummaryOutcome.IN_PROGRESS
            )
        if not await self._write_page(day, summary):
            return SummaryOutcome.UNRESOLVED
        finished = await self._finish(summary, claim, stale if was_mailing else None, recipients)
        if not finished:
            return SummaryOutcome.UNRESOLVED
        return SummaryOutcome.PRODUCED if stale is None else SummaryOutcome.RECOVERED

    def _taken(self, day: date, summary: Summary, stale: SummaryClaim | None) -> SummaryClaim:
        """Our claim: a new one, or the stale one taken over with its send id (and, mid-mail, its letter)."""
        now = as_utc(self._clock())
        owner = uuid.uuid4().hex
        if stale is None:
            return SummaryClaim(
                day=day.isoformat(),
                state=SummaryState.CLAIMED,
                owner=owner,
                claimed_at=now,
                counts=summary.counts(),
                send_id=uuid.uuid4().hex,
                state_at=now,
            )
        return replace(
            stale,
            owner=owner,
            state_at=now,
            counts=summary.counts(),
            send_id=stale.send_id or uuid.uuid4().hex,
        )

    async def _finish(
        self,
        summary: Summary,
        claim: SummaryClaim,
        stale_mailing: SummaryClaim | None,
        recipients: tuple[str, ...],
    ) -> bool:
        mailer = self._mailer
        now = as_utc(self._clock())
        if mailer is None or (stale_mailing is None and not recipients):
            return await self._move(
                claim, lambda c: replace(c, state=SummaryState.DONE, state_at=now, completed_at=now)
            )
        assert claim.send_id is not None  # every claim we write carries one
        if stale_mailing is None:
            letter = SummaryLetter(
                summary.day,
                claim.send_id,
                recipients,
                letter_subject(summary),
                render_html(summary),
            )
            if not await self._move(
                claim,
                lambda c: replace(
                    c,
                    state=SummaryState.MAILING,
                    state_at=now,
                    recipients=letter.to,
                    subject=letter.subject,
                ),
            ):
                return False
            sent = await self._send(mailer, letter)
        else:
            letter = SummaryLetter(
                summary.day,
                claim.send_id,
                stale_mailing.recipients,
                stale_mailing.subject or letter_subject(summary),
                render_html(summary),
            )
            sent = await self._send_unless_there(mailer, letter, stale_mailing)
        return sent is not None and await self._mailed(claim, letter, sent)

    async def _send_unless_there(
        self, mailer: SummaryMailer, letter: SummaryLetter, stale: SummaryClaim
    ) -> LetterSent | None:
        """A stale owner may have sent it: look in Sent Items first (since it moved to mailing)."""
        try:
            found = await mailer.find(letter, stale.moved_at())
        except LetterUnknown:
            log.warning(
                "daily summary %s: Sent Items could not tell whether the mail went out; not sent",
                letter.day.isoformat(),
            )
            return None
        if found is not None:
            return LetterSent(FOUND_ON_TAKEOVER, found)
        return await self._send(mailer, letter)

    async def _send(self, mailer: SummaryMailer, letter: SummaryLetter) -> LetterSent | None:
        try:
            return await mailer.send(letter)
        except (LetterUnknown, LetterRefused) as exc:
            # Left in mailing: after the lease a replica looks in Sent Items and sends only if it is not there.
            log.warning(
                "daily summary %s not mailed (%s); retried after the lease",
                letter.day.isoformat(),
                type(exc).__name__,
            )
            return None

    async def _mailed(self, claim: SummaryClaim, letter: SummaryLetter, sent: LetterSent) -> bool:
        now = as_utc(self._clock())
        moved = await self._move(
            claim,
            lambda c: replace(
                c,
                state=SummaryState.MAILED,
                state_at=now,
                completed_at=now,
                mailed_at=now,
                mail_outcome=sent.outcome,
                sent_item_id=sent.sent_item_id,
            ),
        )
        if moved:
            await self._interactions.record(
                Interaction(
                    ts=now,
                    direction=Direction.OUT,
                    channel=Channel.EMAIL,
                    action=Action.SUMMARY_MAILED.value,
                    message_id=sent.sent_item_id,
                    summary=f"daily summary {claim.day} to {', '.join(letter.to)}; send id {letter.send_id}; "
                    f"{sent.outcome}",
                )
            )
        return moved

    async def _move(
        self, claim: SummaryClaim, change: Callable[[SummaryClaim], SummaryClaim]
    ) -> bool:
        """Move our claim on with If-Match; False when that cannot be settled or the claim is no longer ours."""
        json_key, _ = summary_keys(date.fromisoformat(claim.day))
        moved: list[SummaryClaim] = []  # the record we last tried to write

        def move(current: SummaryClaim | None) -> str | None:
            if current is None or current.owner != claim.owner:
                return None  # taken over meanwhile: not ours to move
            if moved and current == moved[0]:
                return None  # our write landed though its answer was lost
            moved[:] = [change(current)]
            return render_summary_claim(moved[0])

        update = await update_value(
            self._backend,
            json_key,
            parse=parse_summary_claim,
            change=move,
            attempts=2,
        )
        count_conflicts(self._metrics, LEDGER, update)
        stored = update.value
        return (
            update.holds
            and bool(moved)
            and stored is not None
            and stored.owner == claim.owner
            and (stored.state is moved[0].state)
        )

    async def _read_claim(self, key: str) -> Read[SummaryClaim]:
        return await read_parsed(self._backend, key, parse_summary_claim)

    async def _build(self, day: date) -> Summary | None:
        log_read = await self._interactions.read_day(day)
        if log_read.outcome is ReadOutcome.UNRESOLVED:
            return None
        promises: tuple[Promise, ...] = ()
        if self._promises is not None:
            listed = await self._promises.list()
            if listed.outcome is ReadOutcome.UNRESOLVED:
                return None
            promises = listed.promises
        records = log_read.value.records if log_read.value is not None else ()
        skipped = log_read.value.skipped_lines if log_read.value is not None else 0
        return build_summary(day, records, promises, skipped_lines=skipped)

    async def _write_page(self, day: date, summary: Summary) -> bool:
        _, html_key = summary_keys(day)
        page = render_html(summary)
        written = await update_value(
            self._backend,
            html_key,
            parse=str,
            change=lambda current: page if current is None else None,
            attempts=2,
        )
        count_conflicts(self._metrics, LEDGER, written)
        return written.holds

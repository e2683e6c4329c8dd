"""Producing each day's summary once per fleet: claim ``summaries/<day>.json``, then write the HTML.

1. ``summaries/<day>.json`` is created with if_absent, holding ``state: "claimed"``, an owner claim
   id, the claim time and the counts. Creating it is the claim; a replica that finds it already
   there does nothing — unless the claim is stale (see 3).
2. The owner writes ``summaries/<day>.html`` (if_absent: a copy left by a crashed owner is kept),
   then moves the JSON to ``state: "done"`` with If-Match.
3. Recovery: an owner that dies between 1 and 2 leaves ``claimed`` behind. A claim older than the
   lease (10 minutes) is taken over by whichever replica next finds it, with If-Match on the stale
   claim so that only one replica takes it over; the new owner finishes step 2.

An uncertain create or takeover is settled by reading the owner id back (``service.ledger.settle``).
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta
from enum import Enum
from typing import Any

from service.ledger.cas import update_value
from service.clock import Clock, as_utc, utc_now
from service.ledger.daily_summary import Summary, build_summary, render_html, summary_due
from service.ledger.interactions import InteractionLog
from service.ledger.json_records import (
    ExtraFields,
    extra_fields,
    load_object,
    optional_timestamp,
    require_str,
    require_timestamp,
    timestamp_text,
    with_extra,
)
from service.ledger.promises import Promise, PromiseLedger
from service.ledger.reads import CorruptValueError, Read, ReadOutcome, read_parsed
from service.ledger.settle import ClaimWrite, Settlement, write_claim
from service.storage.backend import MemoryBackend
from service.telemetry.metrics import Metrics

log = logging.getLogger(__name__)

SUMMARIES_PREFIX = "summaries/"
LEASE = timedelta(minutes=10)
LEDGER = "summary"
_KNOWN = ("day", "state", "owner", "claimed_at", "completed_at", "counts")
_WHAT = "summary claim"


class SummaryState(str, Enum):
    CLAIMED = "claimed"
    DONE = "done"


def summary_keys(day: date) -> tuple[str, str]:
    """(JSON claim key, HTML key) for ``day``."""
    stem = f"{SUMMARIES_PREFIX}{day.isoformat()}"
    return f"{stem}.json", f"{stem}.html"


@dataclass(frozen=True)
class SummaryClaim:
    day: str
    state: SummaryState
    owner: str
    claimed_at: datetime
    completed_at: datetime | None = None
    counts: dict[str, Any] = field(default_factory=dict, compare=False)
    extra: ExtraFields = field(default=(), repr=False)

    def has_claim(self, claim_id: str) -> bool:
        return self.owner == claim_id

    def is_stale(self, now: datetime, lease: timedelta) -> bool:
        return self.state is SummaryState.CLAIMED and as_utc(now) - self.claimed_at >= lease


def parse_summary_claim(text: str) -> SummaryClaim:
    obj = load_object(text, _WHAT)
    state = obj.get("state")
    if state not in (SummaryState.CLAIMED.value, SummaryState.DONE.value):
        raise CorruptValueError(f"{_WHAT}: field 'state' must be 'claimed' or 'done'")
    counts = obj.get("counts", {})
    if not isinstance(counts, dict):
        raise CorruptValueError(f"{_WHAT}: field 'counts' must be an object")
    return SummaryClaim(
        day=require_str(obj, "day", _WHAT),
        state=SummaryState(state),
        owner=require_str(obj, "owner", _WHAT),
        claimed_at=require_timestamp(obj, "claimed_at", _WHAT),
        completed_at=optional_timestamp(obj, "completed_at", _WHAT),
        counts=counts,
        extra=extra_fields(obj, _KNOWN),
    )


def render_summary_claim(claim: SummaryClaim) -> str:
    obj: dict[str, Any] = {
        "day": claim.day, "state": claim.state.value, "owner": claim.owner,
        "claimed_at": timestamp_text(claim.claimed_at), "completed_at": timestamp_text(claim.completed_at),
        "counts": claim.counts,
    }
    return json.dumps(with_extra(obj, claim.extra), sort_keys=False)


class SummaryOutcome(str, Enum):
    NOT_DUE = "not_due"
    PRODUCED = "produced"
    RECOVERED = "recovered"  # finished a stale claim another replica left behind
    ALREADY_DONE = "already_done"
    IN_PROGRESS = "in_progress"  # another replica holds a live claim: do nothing
    UNRESOLVED = "unresolved"  # a read or write could not be settled: a later run retries


class DailySummaryProducer:
    def __init__(
        self,
        backend: MemoryBackend,
        interactions: InteractionLog,
        *,
        promises: PromiseLedger | None = None,
        clock: Clock = utc_now,
        lease: timedelta = LEASE,
        metrics: Metrics | None = None,
    ) -> None:
        self._backend = backend
        self._interactions = interactions
        self._promises = promises
        self._clock = clock
        self._lease = lease
        self._metrics = metrics

    async def run_if_due(self) -> SummaryOutcome:
        day = summary_due(self._clock())
        if day is None:
            return SummaryOutcome.NOT_DUE
        return await self.produce(day)

    async def produce(self, day: date) -> SummaryOutcome:
        outcome = await self._produce(day)
        if self._metrics is not None:
            self._metrics.claims.labels(ledger=LEDGER, outcome=outcome.value).inc()
        log.info("daily summary %s: %s", day.isoformat(), outcome.value)
        return outcome

    async def _produce(self, day: date) -> SummaryOutcome:
        json_key, _ = summary_keys(day)
        existing = await self._read_claim(json_key)
        if existing.outcome is ReadOutcome.UNRESOLVED:
            return SummaryOutcome.UNRESOLVED
        if existing.value is not None and existing.value.state is SummaryState.DONE:
            return SummaryOutcome.ALREADY_DONE
        if existing.value is not None and not existing.value.is_stale(self._clock(), self._lease):
            return SummaryOutcome.IN_PROGRESS
        summary = await self._build(day)
        if summary is None:
            return SummaryOutcome.UNRESOLVED
        claim = SummaryClaim(
            day=day.isoformat(), state=SummaryState.CLAIMED, owner=uuid.uuid4().hex,
            claimed_at=as_utc(self._clock()), counts=summary.counts(),
        )
        # Create the claim, or take over the stale one we just read (If-Match on it).
        write = ClaimWrite(json_key, render_summary_claim(claim), existing.etag, claim.owner)
        result = await write_claim(self._backend, write, lambda: self._read_claim(json_key))
        if result.settlement is Settlement.UNKNOWN:
            return SummaryOutcome.UNRESOLVED
        if result.settlement is Settlement.LOST:
            other = result.read.value if result.read is not None else None
            return SummaryOutcome.ALREADY_DONE if other is not None and other.state is SummaryState.DONE else (
                SummaryOutcome.IN_PROGRESS
            )
        if not await self._finish(day, summary, claim):
            return SummaryOutcome.UNRESOLVED
        return SummaryOutcome.PRODUCED if existing.value is None else SummaryOutcome.RECOVERED

    async def stored(self, day: date) -> Read[SummaryClaim]:
        """The stored claim of ``day`` (its state and counts), as whichever replica produced it wrote it."""
        return await self._read_claim(summary_keys(day)[0])

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
        return build_summary(day, records, promises)

    async def _finish(self, day: date, summary: Summary, claim: SummaryClaim) -> bool:
        json_key, html_key = summary_keys(day)
        page = render_html(summary)
        html_written = await update_value(
            self._backend, html_key, parse=str, change=lambda current: page if current is None else None,
            attempts=2, ledger=LEDGER, metrics=self._metrics,
        )
        if not html_written.holds:
            return False
        done = render_summary_claim(replace(claim, state=SummaryState.DONE, completed_at=as_utc(self._clock())))

        def mark_done(current: SummaryClaim | None) -> str | None:
            # Only the owner finishes; if someone took over meanwhile, the page exists and they finish.
            if current is None or current.owner != claim.owner or current.state is SummaryState.DONE:
                return None
            return done

        marked = await update_value(
            self._backend, json_key, parse=parse_summary_claim, change=mark_done,
            attempts=2, ledger=LEDGER, metrics=self._metrics,
        )
        return marked.holds

"""The fleet's shared Graph backoff: when Graph tells one replica "later", every replica holds.

Graph's budget is per app per tenant, so a Retry-After that one replica receives is the whole fleet's.
One small record, key ``graph/backoff.json``: ``{"until", "written_at", "status", "route", "writer"}``.

- **Writing**: the Graph client announces each hold it took from a Retry-After (``announce``, never
  blocking a request); this replica's backoff loop, woken at once, stores it with ``if_absent`` or
  ``If-Match`` only when it ends later than the stored one. A lost race re-reads and tries again; a write
  whose outcome is unknown is settled by the next read; a corrupt or implausible record (one that holds
  no one, below) is overwritten by the next real hold. Nothing here
  raises into a worker: the worst case is a replica pacing itself on its own answers alone.
- **Reading**: the same loop reads the record every ``READ_EVERY_S`` (one blob read a second per
  replica) and the client holds until ``held_until()`` before each request.
- **Failing toward normal pacing**: a record that cannot be read, does not parse, or is implausible (a
  hold longer than ``max_hold``, or written in the future beyond ``max_skew``: a wrong clock) holds no
  one; the replica logs it once and counts it. A hold already learnt stays until it ends on its own
  (never longer than ``max_hold``), so a stale record can never stop Graph use for good.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from service.clock import Clock, format_timestamp, utc_now
from service.ledger.records.cas import UpdateOutcome, count_conflicts, update_value
from service.ledger.records.fields import load_object, require_str, require_timestamp
from service.ledger.records.reads import CorruptValueError, ReadOutcome, read_parsed
from service.storage.backend import MemoryBackend
from service.telemetry.metrics import LedgerMetrics, RoleMetrics

log = logging.getLogger(__name__)

BACKOFF_KEY = "graph/backoff.json"
READ_EVERY_S = 1.0  # how stale a replica's view of the fleet's hold may be
_WHAT = "graph backoff"
_WRITE_ATTEMPTS = 2  # a lost race re-reads and may find a longer hold already stored


@dataclass(frozen=True, slots=True)
class BackoffRecord:
    until: datetime
    written_at: datetime
    status: int
    route: str
    writer: str


@dataclass(frozen=True, slots=True)
class CorruptBackoff:
    """A stored value that is not a backoff record: read as "no hold", and overwritten by the next one."""

    reason: str


def parse_backoff(text: str) -> BackoffRecord:
    obj = load_object(text, _WHAT)
    status = obj.get("status")
    if not isinstance(status, int) or isinstance(status, bool) or not 400 <= status <= 599:
        raise CorruptValueError(f"{_WHAT}: field 'status' must be an HTTP error status")
    return BackoffRecord(
        until=require_timestamp(obj, "until", _WHAT),
        written_at=require_timestamp(obj, "written_at", _WHAT),
        status=status,
        route=require_str(obj, "route", _WHAT),
        writer=require_str(obj, "writer", _WHAT),
    )


def parse_stored(text: str) -> BackoffRecord | CorruptBackoff:
    """Never raises, so a corrupt record reads as PRESENT with its ETag and can be overwritten."""
    try:
        return parse_backoff(text)
    except CorruptValueError as exc:
        return CorruptBackoff(str(exc))


def render_backoff(record: BackoffRecord) -> str:
    return json.dumps(
        {
            "until": format_timestamp(record.until),
            "written_at": format_timestamp(record.written_at),
            "status": record.status,
            "route": record.route,
            "writer": record.writer,
        },
        sort_keys=True,
    )


def implausible(
    record: BackoffRecord, now: datetime, *, max_hold: timedelta, max_skew: timedelta
) -> str | None:
    """Why ``record`` must hold no one, or None when it may (expired or not)."""
    if record.until - record.written_at > max_hold + max_skew:
        return "a hold longer than any Retry-After the client honours"
    if record.written_at > now + max_skew:
        return "written in the future (a replica's clock is wrong)"
    return None


def extends(
    stored: BackoffRecord | CorruptBackoff | None,
    mine: BackoffRecord,
    now: datetime,
    *,
    max_hold: timedelta,
    max_skew: timedelta,
) -> bool:
    """Whether ``mine`` must be written over ``stored`` (the rule: a hold only ever grows). A stored
    record that holds no one (corrupt or implausible) is no hold to grow from: a real hold replaces it,
    or a far-future ``until`` would keep every later hold from being shared."""
    if not isinstance(stored, BackoffRecord):
        return True
    return (
        implausible(stored, now, max_hold=max_hold, max_skew=max_skew) is not None
        or mine.until > stored.until
    )


class FleetBackoff:
    """One replica's view of the fleet's Graph hold, and its writer (``cycle`` runs every ``READ_EVERY_S``)."""

    def __init__(
        self,
        backend: MemoryBackend,
        replica_id: str,
        *,
        clock: Clock = utc_now,
        metrics: RoleMetrics,
        ledger_metrics: LedgerMetrics,
        max_hold: timedelta = timedelta(seconds=60),
        max_skew: timedelta = timedelta(seconds=30),
    ) -> None:
        self._backend = backend
        self._replica_id = replica_id
        self._clock = clock
        self._metrics = metrics
        self._ledger_metrics = ledger_metrics  # its compare-and-swap conflicts
        self._max_hold = max_hold
        self._max_skew = max_skew
        self.known: BackoffRecord | None = (
            None  # the fleet's hold as last read or written (maybe over)
        )
        self._pending: BackoffRecord | None = None  # our longest hold not yet stored
        self._announced = asyncio.Event()
        self._trouble: str | None = None  # what last went wrong, logged once until it clears

    # --- the client's side (SharedHold) ---

    def held_until(self) -> float:
        return self.known.until.timestamp() if self.known is not None else 0.0

    def announce(self, until: float, status: int, route: str) -> None:
        now = self._clock()
        record = BackoffRecord(
            datetime.fromtimestamp(until, timezone.utc), now, status, route, self._replica_id
        )
        if self._pending is None or record.until > self._pending.until:
            self._pending = record
            self._announced.set()

    async def announced(self) -> None:
        """The backoff loop's wake-up: returns once a hold was announced since the last call."""
        await self._announced.wait()
        self._announced.clear()

    # --- the loop ---

    async def cycle(self) -> None:
        """Store our pending hold if it extends the fleet's, else read the fleet's."""
        now = self._clock()
        if self._pending is not None and self._pending.until <= now:
            self._pending = None  # over before it could be stored: nothing left to tell
        if self._pending is not None:
            await self._publish(self._pending)
        else:
            await self._refresh(now)
        left = (self.known.until - self._clock()).total_seconds() if self.known is not None else 0.0
        self._metrics.graph_fleet_backoff_seconds.set(max(0.0, left))

    async def _publish(self, mine: BackoffRecord) -> None:
        update = await update_value(
            self._backend,
            BACKOFF_KEY,
            parse=parse_stored,
            change=lambda stored: (
                render_backoff(mine)
                if extends(
                    stored, mine, self._clock(), max_hold=self._max_hold, max_skew=self._max_skew
                )
                else None
            ),
            attempts=_WRITE_ATTEMPTS,
        )
        count_conflicts(self._ledger_metrics, "graph_backoff", update)
        if update.outcome is UpdateOutcome.UNRESOLVED:
            self._troubled(
                "read_failed",
                "the shared Graph backoff could not be read; holding on our own answers",
            )
            return  # kept pending: the next cycle tries again while the hold lasts
        if update.outcome is UpdateOutcome.EXHAUSTED:
            self._count("conflict")
            return
        self._pending = None
        self._count(update.outcome.value)
        stored = update.value
        self._adopt(stored if isinstance(stored, BackoffRecord) else mine, self._clock())
        if update.outcome is UpdateOutcome.WRITTEN:
            # A 5xx hold is news (Graph is failing); a 429 hold is routine under load, so only in debug.
            level = logging.INFO if mine.status >= 500 else logging.DEBUG
            log.log(
                level,
                "shared a Graph hold with the fleet",
                extra={
                    "status": mine.status,
                    "route": mine.route,
                    "hold_s": round((mine.until - mine.written_at).total_seconds(), 1),
                },
            )

    async def _refresh(self, now: datetime) -> None:
        read = await read_parsed(self._backend, BACKOFF_KEY, parse_stored)
        if read.outcome is ReadOutcome.UNRESOLVED:
            # A hold already learnt ends on its own; nothing new is adopted from an unreadable store.
            self._troubled(
                "read_failed",
                "the shared Graph backoff could not be read; holding on our own answers",
            )
            return
        if read.outcome is ReadOutcome.ABSENT:
            self.known = None
            self._cleared()
            return
        stored = read.value
        if isinstance(stored, CorruptBackoff):
            self.known = None
            self._troubled(
                "corrupt",
                f"the shared Graph backoff is corrupt ({stored.reason}); ignoring it until "
                "a replica overwrites it",
            )
            return
        assert stored is not None
        self._adopt(stored, now)

    def _adopt(self, stored: BackoffRecord, now: datetime) -> None:
        why = implausible(stored, now, max_hold=self._max_hold, max_skew=self._max_skew)
        if why is not None:
            self.known = None
            self._troubled("implausible", f"the shared Graph backoff holds no one: {why}")
            return
        self.known = stored
        self._cleared()

    def _troubled(self, event: str, message: str) -> None:
        self._count(event)
        if self._trouble != event:
            log.warning(message, extra={"key": BACKOFF_KEY})
            self._trouble = event

    def _cleared(self) -> None:
        if self._trouble is not None:
            log.info("the shared Graph backoff is readable again", extra={"key": BACKOFF_KEY})
            self._trouble = None

    def _count(self, event: str) -> None:
        self._metrics.graph_fleet_backoff_events.labels(event=event).inc()

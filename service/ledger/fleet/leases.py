"""Leases for the fleet's singleton roles (the chat scanner, discovery, the safety sweep, the
subscription manager): one small blob per role, holding holder, epoch and expiry.

The model is the Event Hubs processor's ownership records: take a role with ``if_absent`` (first
ever) or ``If-Match`` on the record read (renewal, or takeover once it expired), renew well before
expiry, and let another replica take over after it. What makes it safe is the holder's side: it acts
in the role only while its *own* view of the lease is valid, measured on its monotonic clock from
the moment before it read the record, minus a margin for clock skew between replicas — and a
renewal that fails in any way (a lost race, a timeout, an unreadable record) ends that view at once.
So a holder that cannot renew stops acting before anyone else may start.

Key ``leases/<role>.json``: ``{"role", "holder", "epoch", "expires_at", "renewed_at"}``. The epoch
grows with every change of holder, so work stamped with it can be told apart from a former holder's.

A record that cannot be trusted (it does not parse, names another role, or expires further ahead than
any holder could have written) is nobody's lease — but it is not absent either, so it cannot be
created over. Left alone it would take the role from every replica for good; taken at once, it would
let a replica take a role whose record a holder is just rewriting. So a replica notes the record's
ETag when it first sees it so, and takes it over with If-Match on that ETag once the same ETag has stood
for a whole ``ttl`` (no holder renewed it in a lease lifetime): If-Match lets only one replica win.
Its epoch is one past the highest this replica knows of (the record's own, when one can be read).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum

from service.clock import Clock, format_timestamp, utc_now
from service.ledger.records.fields import load_object, require_str, require_timestamp
from service.ledger.records.reads import CorruptValueError, ReadOutcome, read_parsed
from service.storage.backend import MemoryBackend
from service.storage.errors import ConcurrencyError, StorageError
from service.telemetry.metrics import RoleMetrics

log = logging.getLogger(__name__)

PREFIX = "leases/"
_WHAT = "lease"


def lease_key(role: str) -> str:
    return f"{PREFIX}{role}.json"


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    role: str
    holder: str
    epoch: int
    expires_at: datetime
    renewed_at: datetime

    def expired(self, now: datetime) -> bool:
        return now >= self.expires_at


@dataclass(frozen=True, slots=True)
class UnreadableLease:
    """A stored value that is no lease record; ``epoch`` is the one it names, when one can be read."""

    reason: str
    epoch: int = 0


def parse_lease(text: str) -> LeaseRecord:
    obj = load_object(text, _WHAT)
    epoch = obj.get("epoch")
    if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 1:
        raise CorruptValueError(f"{_WHAT}: field 'epoch' must be a positive integer")
    return LeaseRecord(
        role=require_str(obj, "role", _WHAT),
        holder=require_str(obj, "holder", _WHAT),
        epoch=epoch,
        expires_at=require_timestamp(obj, "expires_at", _WHAT),
        renewed_at=require_timestamp(obj, "renewed_at", _WHAT),
    )


def render_lease(record: LeaseRecord) -> str:
    return json.dumps(
        {
            "role": record.role,
            "holder": record.holder,
            "epoch": record.epoch,
            "expires_at": format_timestamp(record.expires_at),
            "renewed_at": format_timestamp(record.renewed_at),
        },
        sort_keys=True,
    )


def parse_stored(text: str) -> LeaseRecord | UnreadableLease:
    """Never raises, so an unreadable record still reads with its ETag and can be taken over."""
    try:
        return parse_lease(text)
    except CorruptValueError as exc:
        return UnreadableLease(str(exc), _salvaged_epoch(text))


def _salvaged_epoch(text: str) -> int:
    try:
        epoch = json.loads(text).get("epoch")
    except (ValueError, AttributeError):
        return 0
    return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) and epoch > 0 else 0


def untrusted(
    record: LeaseRecord, role: str, now: datetime, *, ttl: timedelta, margin: timedelta
) -> str | None:
    """Why a parsed record cannot be anyone's lease, or None when it may be."""
    if record.role != role:
        return f"it names the role {record.role!r}"
    if record.expires_at > now + ttl + margin:
        return "it expires further ahead than any holder writes (a wrong clock, or a bug)"
    return None


class LeaseStep(str, Enum):
    """What one acquire-or-renew attempt did."""

    ACQUIRED = "acquired"  # first holder of the role
    TAKEN_OVER = "taken_over"  # the previous holder's lease had expired
    RENEWED = "renewed"
    HELD_ELSEWHERE = "held_elsewhere"  # someone else holds an unexpired lease
    LOST = "lost"  # a race, or a write whose outcome is unknown: not ours (for now)
    UNRESOLVED = "unresolved"  # the record could not be read or parsed
    TAKEN_UNREADABLE = (
        "taken_unreadable"  # a record unreadable for a whole ttl, taken with If-Match
    )


def decide_step(
    current: LeaseRecord | None,
    *,
    me: str,
    our_etag: str | None,
    read_etag: str | None,
    now: datetime,
) -> LeaseStep:
    """Whether to write, and as what (pure: the rule the tests pin)."""
    if current is None:
        return LeaseStep.ACQUIRED
    if current.holder == me and our_etag is not None and read_etag == our_etag:
        return LeaseStep.RENEWED  # unbroken since our last write
    if current.expired(now):
        return LeaseStep.TAKEN_OVER
    # Unexpired and not provably ours: another replica's — or ours from before a restart or an
    # uncertain write, which is left to expire rather than guessed at.
    return LeaseStep.HELD_ELSEWHERE


@dataclass
class Lease:
    """One replica's stake in one role. ``held`` is the only question a role's loop asks."""

    backend: MemoryBackend
    role: str
    holder: str
    ttl: timedelta = timedelta(seconds=30)
    # How much earlier than its record says the holder stops: covers clock skew between replicas
    # and the time between sending a write and its commit.
    margin: timedelta = timedelta(seconds=10)
    clock: Clock = utc_now
    monotonic: Callable[[], float] = time.monotonic
    metrics: RoleMetrics = field(kw_only=True)
    epoch: int | None = None
    last_known: LeaseRecord | None = None  # the record as last read or written (who holds the role)
    _etag: str | None = None
    _valid_until: float = field(default=float("-inf"))
    _next_attempt: float = field(default=float("-inf"))
    _in_doubt: str | None = None  # the record of a write whose outcome is unknown, as rendered
    _unreadable: tuple[str, float] | None = (
        None  # (ETag, monotonic first seen) of an untrusted record
    )

    def __post_init__(self) -> None:
        if self.margin >= self.ttl:
            raise ValueError("a lease's margin must be shorter than its ttl")
        self._publish()  # 0 from the start: a role no replica holds shows as such on every replica

    @property
    def renew_every(self) -> timedelta:
        """Renew well before expiry: three tries fit in the part of the ttl the holder may act in."""
        return (self.ttl - self.margin) / 3

    def held(self) -> bool:
        return self.monotonic() < self._valid_until

    async def keep(self) -> bool:
        """For a role's loop that runs more often than renewals are due: acquire or renew once every
        ``renew_every``, and say whether this replica holds the role now."""
        now = self.monotonic()
        if now >= self._next_attempt:
            self._next_attempt = now + self.renew_every.total_seconds()
            await self.acquire_or_renew()
        return self.held()

    async def release(self) -> None:
        """Stopping: end our lease now (If-Match on our own record), so a successor takes the role at
        once instead of after the ttl — the Event Hubs processor relinquishes ownership the same way.
        Best effort: a failure leaves the record to expire."""
        if not self.held() or self._etag is None or self.epoch is None:
            return
        now = self.clock()
        record = LeaseRecord(self.role, self.holder, self.epoch, now, now)
        self._valid_until = float("-inf")  # stop acting before the write, whatever it does
        try:
            await self.backend.write_text(
                lease_key(self.role), render_lease(record), if_match=self._etag
            )
        except StorageError as exc:
            log.warning(
                "lease not released; it expires by itself",
                extra={"role": self.role, "error": type(exc).__name__},
            )
        self._etag = None
        self._publish()

    def renew_now(self) -> None:
        """Make the next ``keep`` renew (a test, or a role that suspects its lease)."""
        self._next_attempt = float("-inf")

    async def acquire_or_renew(self) -> LeaseStep:
        started = self.monotonic()
        read = await read_parsed(self.backend, lease_key(self.role), parse_stored)
        if read.outcome is ReadOutcome.UNRESOLVED:
            return self._lose(LeaseStep.UNRESOLVED)
        stored = read.value
        if stored is not None and read.etag is not None:
            why = (
                stored.reason
                if isinstance(stored, UnreadableLease)
                else untrusted(stored, self.role, self.clock(), ttl=self.ttl, margin=self.margin)
            )
            if why is not None:
                return await self._take_unreadable(stored, read.etag, why, started)
        self._unreadable = None
        now = self.clock()
        current = stored if isinstance(stored, LeaseRecord) else None
        self.last_known = current
        if (
            self._in_doubt is not None
            and current is not None
            and render_lease(current) == self._in_doubt
        ):
            # Our uncertain write did land (only we write our holder id with that epoch and
            # timestamp): the record is ours, renewed from here instead of left to expire.
            self._etag = read.etag
        self._in_doubt = None
        step = decide_step(
            current, me=self.holder, our_etag=self._etag, read_etag=read.etag, now=now
        )
        if step is LeaseStep.HELD_ELSEWHERE:
            return self._lose(step)
        epoch = 1 if current is None else current.epoch + (0 if step is LeaseStep.RENEWED else 1)
        return await self._write(step, epoch, None if current is None else read.etag, now, started)

    async def _take_unreadable(
        self, stored: LeaseRecord | UnreadableLease, etag: str, why: str, started: float
    ) -> LeaseStep:
        """An untrusted record: wait until the same ETag stood for a ttl, then take it with If-Match on it."""
        if self._unreadable is None or self._unreadable[0] != etag:
            log.warning(
                "lease record cannot be trusted; taking it over if it stays so for a lease lifetime",
                extra={"role": self.role, "why": why, "ttl_s": self.ttl.total_seconds()},
            )
            self._count("unreadable")
            self._unreadable = (etag, started)
        if started - self._unreadable[1] < self.ttl.total_seconds():
            return self._lose(LeaseStep.UNRESOLVED)
        known = max(stored.epoch, self.last_known.epoch if self.last_known is not None else 0)
        step = await self._write(LeaseStep.TAKEN_UNREADABLE, known + 1, etag, self.clock(), started)
        self._unreadable = None
        return step

    async def _write(
        self, step: LeaseStep, epoch: int, etag: str | None, now: datetime, started: float
    ) -> LeaseStep:
        """Write our record (``if_absent`` when ``etag`` is None, else If-Match on it) and hold from ``started``."""
        record = LeaseRecord(self.role, self.holder, epoch, now + self.ttl, now)
        try:
            if etag is None:
                new_etag = await self.backend.write_text(
                    lease_key(self.role), render_lease(record), if_absent=True
                )
            else:
                new_etag = await self.backend.write_text(
                    lease_key(self.role), render_lease(record), if_match=etag
                )
        except ConcurrencyError:
            self._count("conflict")
            return self._lose(LeaseStep.LOST)
        except StorageError as exc:
            # The write may still land; until a later read proves the record ours, act as if not.
            log.warning(
                "lease write outcome unknown; not acting in the role",
                extra={"role": self.role, "error": type(exc).__name__},
            )
            step = self._lose(LeaseStep.LOST)
            self._in_doubt = render_lease(record)
            return step
        was_held = self.held()
        self._etag, self.epoch, self.last_known = new_etag, epoch, record
        self._valid_until = started + (self.ttl - self.margin).total_seconds()
        self._publish()
        if step is not LeaseStep.RENEWED or not was_held:
            log.info("lease taken", extra={"role": self.role, "epoch": epoch, "step": step.value})
            self._count(step.value)
        return step

    def _lose(self, step: LeaseStep) -> LeaseStep:
        if self.held():
            log.warning(
                "lease lost; stopping the role at once",
                extra={"role": self.role, "step": step.value},
            )
            self._count("lost")
        self._valid_until = float("-inf")
        self._etag = None
        self._publish()
        return step

    def _publish(self) -> None:
        self.metrics.lease_held.labels(role=self.role).set(1 if self.held() else 0)

    def _count(self, event: str) -> None:
        self.metrics.lease_events.labels(role=self.role, event=event).inc()

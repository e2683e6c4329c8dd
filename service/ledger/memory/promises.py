"""The shared promises ledger (``promises.jsonl``): one JSON record per line, the last line per id wins.

Every write reads the file with its ETag, folds it, applies one change, compacts, and writes it back
with If-Match (if_absent for the first), retrying once on a conflict. Compaction keeps every open
promise and those resolved within the retention window (14 days), one line each. A line that is not
a promise record makes the file unwritable rather than silently dropped: rewriting would lose it,
so writes answer UNRESOLVED until someone fixes or removes that line (reads skip it). A record the
single-host system wrote (``description``, ``due_by``) reads as one of ours (``single_host_records``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from service.ledger.records.cas import Update, UpdateOutcome, count_conflicts, update_value
from service.clock import Clock, as_utc, utc_now
from service.ledger.records.fields import (
    ExtraFields,
    extra_fields,
    load_object,
    optional_str,
    optional_timestamp,
    require_str,
    require_timestamp,
    timestamp_text,
    with_extra,
)
from service.ledger.records.reads import CorruptValueError, ReadOutcome, read_parsed
from service.ledger.memory.single_host_records import fleet_promise_fields
from service.storage.backend import MemoryBackend
from service.telemetry.metrics import LedgerMetrics

PROMISES_KEY = "promises.jsonl"
RETENTION = timedelta(days=14)
LEDGER = "promises"
_KNOWN = (
    "id",
    "text",
    "status",
    "created_at",
    "chat_id",
    "to",
    "due_at",
    "resolved_at",
    "resolution",
)
_WHAT = "promise record"


class PromiseStatus(str, Enum):
    OPEN = "open"
    RESOLVED = "resolved"


@dataclass(frozen=True)
class Promise:
    id: str
    text: str
    created_at: datetime
    status: PromiseStatus = PromiseStatus.OPEN
    chat_id: str | None = None
    to: str | None = None  # who it was made to
    due_at: datetime | None = None
    resolved_at: datetime | None = None
    resolution: str | None = None
    extra: ExtraFields = field(default=(), repr=False)

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "id": self.id,
            "text": self.text,
            "status": self.status.value,
            "created_at": timestamp_text(self.created_at),
            "chat_id": self.chat_id,
            "to": self.to,
            "due_at": timestamp_text(self.due_at),
            "resolved_at": timestamp_text(self.resolved_at),
            "resolution": self.resolution,
        }
        return with_extra(obj, self.extra)


def promise_from_json(record: dict[str, Any]) -> Promise:
    obj = fleet_promise_fields(record)
    status = obj.get("status", PromiseStatus.OPEN.value)
    if status not in (PromiseStatus.OPEN.value, PromiseStatus.RESOLVED.value):
        raise CorruptValueError(f"{_WHAT}: field 'status' must be 'open' or 'resolved'")
    text = obj.get("text", "")
    if not isinstance(text, str):
        raise CorruptValueError(f"{_WHAT}: field 'text' must be a string")
    return Promise(
        id=require_str(obj, "id", _WHAT),
        text=text,
        created_at=require_timestamp(obj, "created_at", _WHAT),
        status=PromiseStatus(status),
        chat_id=optional_str(obj, "chat_id", _WHAT),
        to=optional_str(obj, "to", _WHAT),
        due_at=optional_timestamp(obj, "due_at", _WHAT),
        resolved_at=optional_timestamp(obj, "resolved_at", _WHAT),
        resolution=optional_str(obj, "resolution", _WHAT),
        extra=extra_fields(obj, _KNOWN),
    )


# --- pure rules ---


def fold_promises(text: str) -> tuple[Promise, ...]:
    """The promises in ``text``, the last line per id winning, in order of first appearance."""
    folded: dict[str, Promise] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            promise = promise_from_json(load_object(line, _WHAT))
        except CorruptValueError as exc:
            raise CorruptValueError(
                f"{PROMISES_KEY} line {number}: {exc}; fix or remove that line"
            ) from None
        folded[promise.id] = promise
    return tuple(folded.values())


def fold_readable(text: str) -> tuple[tuple[Promise, ...], int]:
    """Like ``fold_promises`` but skipping bad lines (for reads); returns how many were skipped."""
    good: list[str] = []
    skipped = 0
    for line in text.splitlines():
        try:
            fold_promises(line)
            good.append(line)
        except CorruptValueError:
            skipped += 1
    return fold_promises("\n".join(good)), skipped


def compact(
    promises: Iterable[Promise], *, now: datetime, retention: timedelta = RETENTION
) -> tuple[Promise, ...]:
    """Open promises, and resolved ones whose resolution is younger than ``retention``."""
    horizon = as_utc(now) - retention
    return tuple(
        p
        for p in promises
        if p.status is PromiseStatus.OPEN
        or (p.resolved_at is not None and p.resolved_at >= horizon)
    )


def render_promises(promises: Iterable[Promise]) -> str:
    return "".join(json.dumps(p.to_json()) + "\n" for p in promises)


def with_promise(promises: tuple[Promise, ...], promise: Promise) -> tuple[Promise, ...]:
    """``promises`` with ``promise`` added, or replacing the record with the same id."""
    if any(p.id == promise.id for p in promises):
        return tuple(promise if p.id == promise.id else p for p in promises)
    return (*promises, promise)


# --- shell ---


class PromiseWriteOutcome(str, Enum):
    WRITTEN = "written"
    NOT_FOUND = "not_found"
    UNRESOLVED = "unresolved"  # unreadable, corrupt, or without ETag: nothing written
    CONFLICTED = "conflicted"  # lost the race twice, or the write failed twice


@dataclass(frozen=True)
class PromiseWrite:
    outcome: PromiseWriteOutcome
    promise: Promise | None = None


@dataclass(frozen=True)
class PromiseList:
    outcome: ReadOutcome
    promises: tuple[Promise, ...] = ()
    skipped_lines: int = 0


_WRITE_OUTCOME = {
    UpdateOutcome.WRITTEN: PromiseWriteOutcome.WRITTEN,
    UpdateOutcome.ALREADY: PromiseWriteOutcome.WRITTEN,
    UpdateOutcome.UNRESOLVED: PromiseWriteOutcome.UNRESOLVED,
    UpdateOutcome.EXHAUSTED: PromiseWriteOutcome.CONFLICTED,
}


class PromiseLedger:
    def __init__(
        self,
        backend: MemoryBackend,
        *,
        clock: Clock = utc_now,
        retention: timedelta = RETENTION,
        metrics: LedgerMetrics,
    ) -> None:
        self._backend = backend
        self._clock = clock
        self._retention = retention
        self._metrics = metrics

    async def list(self, *, status: PromiseStatus | None = None) -> PromiseList:
        read = await read_parsed(self._backend, PROMISES_KEY, fold_readable)
        if read.value is None:
            return PromiseList(read.outcome)
        promises, skipped = read.value
        return PromiseList(
            read.outcome,
            tuple(p for p in promises if status is None or p.status is status),
            skipped,
        )

    async def add(
        self,
        text: str,
        *,
        chat_id: str | None = None,
        to: str | None = None,
        due_at: datetime | None = None,
    ) -> PromiseWrite:
        promise = Promise(
            id=uuid.uuid4().hex,
            text=text,
            created_at=as_utc(self._clock()),
            chat_id=chat_id,
            to=to,
            due_at=None if due_at is None else as_utc(due_at),
        )
        update = await self._update(
            lambda current: None if promise in current else with_promise(current, promise)
        )
        return PromiseWrite(_WRITE_OUTCOME[update.outcome], promise if update.holds else None)

    async def resolve(self, promise_id: str, *, resolution: str | None = None) -> PromiseWrite:
        """Mark a promise resolved; resolving a resolved one changes nothing and answers WRITTEN."""
        resolved_at = as_utc(self._clock())
        found: list[Promise] = []

        def change(current: tuple[Promise, ...]) -> tuple[Promise, ...] | None:
            found.clear()
            match = next((p for p in current if p.id == promise_id), None)
            if match is None:
                return None
            found.append(match)
            if match.status is PromiseStatus.RESOLVED:
                return None
            done = replace(
                match, status=PromiseStatus.RESOLVED, resolved_at=resolved_at, resolution=resolution
            )
            found[0] = done
            return with_promise(current, done)

        update = await self._update(change)
        if update.holds and not found:
            return PromiseWrite(PromiseWriteOutcome.NOT_FOUND)
        return PromiseWrite(_WRITE_OUTCOME[update.outcome], found[0] if update.holds else None)

    async def _update(
        self, change: Callable[[tuple[Promise, ...]], tuple[Promise, ...] | None]
    ) -> Update[tuple[Promise, ...]]:
        now = self._clock()

        def apply(current: tuple[Promise, ...] | None) -> str | None:
            changed = change(current or ())
            return (
                None
                if changed is None
                else render_promises(compact(changed, now=now, retention=self._retention))
            )

        # "Retry once on conflict": two attempts.
        update = await update_value(
            self._backend,
            PROMISES_KEY,
            parse=fold_promises,
            change=apply,
            attempts=2,
        )
        count_conflicts(self._metrics, LEDGER, update)
        return update

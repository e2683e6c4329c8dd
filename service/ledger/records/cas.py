"""Compare-and-swap updates of the ledgers whose change is idempotent (watched chats, promises, cursor
baselines): read with ETag, compute the new value, write with If-Match (if_absent for the first).

Because applying the change twice is harmless, an uncertain write needs no claim id: the loop reads
again, and if the change already holds (ours landed, or someone wrote the same thing) it is done.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Generic, TypeVar

from service.ledger.records.reads import Read, ReadOutcome, read_parsed
from service.storage.backend import MemoryBackend
from service.storage.errors import ConcurrencyError, StorageError
from service.telemetry.metrics import LedgerMetrics

T = TypeVar("T")


class UpdateOutcome(str, Enum):
    WRITTEN = "written"  # our write committed
    ALREADY = "already"  # the change already held (maybe through our own uncertain write)
    UNRESOLVED = "unresolved"  # the value could not be read, or parsed, or had no ETag
    EXHAUSTED = "exhausted"  # every attempt lost a race or failed


@dataclass(frozen=True)
class Update(Generic[T]):
    outcome: UpdateOutcome
    value: T | None = None  # the stored value as last known (after our write when WRITTEN)
    attempts: int = 0
    conflicts: int = 0  # writes that lost a race (ConcurrencyError)

    @property
    def holds(self) -> bool:
        return self.outcome in (UpdateOutcome.WRITTEN, UpdateOutcome.ALREADY)


async def update_value(
    backend: MemoryBackend,
    key: str,
    *,
    parse: Callable[[str], T],
    change: Callable[[T | None], str | None],
    attempts: int,
) -> Update[T]:
    """Apply ``change`` (current value or None when absent → new content, or None when it already holds)."""
    read: Read[T] = await read_parsed(backend, key, parse)
    conflicts = 0
    for attempt in range(attempts + 1):
        if read.outcome is ReadOutcome.UNRESOLVED:
            return Update(UpdateOutcome.UNRESOLVED, attempts=attempt, conflicts=conflicts)
        content = change(read.value)
        if content is None:
            return Update(UpdateOutcome.ALREADY, read.value, attempt, conflicts)
        if attempt == attempts:
            break
        try:
            if read.outcome is ReadOutcome.ABSENT:
                await backend.write_text(key, content, if_absent=True)
            else:
                await backend.write_text(key, content, if_match=read.etag)
        except StorageError as exc:
            conflicts += isinstance(exc, ConcurrencyError)
            read = await read_parsed(
                backend, key, parse
            )  # settles "did it land?" and feeds the retry
            continue
        return Update(UpdateOutcome.WRITTEN, parse(content), attempt + 1, conflicts)
    return Update(UpdateOutcome.EXHAUSTED, read.value, attempts, conflicts)


def count_conflicts(metrics: LedgerMetrics, ledger: str, update: Update[Any]) -> None:
    """Count the races ``update`` lost for ``ledger`` (no race, no series: a zero would add one)."""
    if update.conflicts:
        metrics.cas_conflicts.labels(ledger=ledger).inc(update.conflicts)

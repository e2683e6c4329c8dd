"""The hosts' delivery records in the shared container, changed by compare-and-swap.

``service.ledger.records.cas.update_value`` reads before every write; here the replica keeps the record and
ETag its own last write returned, because the replica serving a host is nearly always the only writer
of that host's record (its claims' intents, its host's acknowledgements). That saves a read per change,
which is what keeps a delivered message at four Blob operations with the claim. A stale ETag costs one
conflict, a read and the retry. Every change is idempotent (keyed by message and claim id), so a write
whose outcome is unknown is settled the same way: read again and re-apply.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from dataclasses import dataclass, field

from service.delivery.host_record import (
    HostRecord,
    held,
    owed_after_claim,
    empty_record,
    host_of_record_key,
    parse_host_record,
    record_key,
    render_host_record,
    RECORD_PREFIX,
)
from service.domain.message import InboundMessage
from service.ledger.records.reads import ReadOutcome, read_parsed
from service.storage.backend import MemoryBackend
from service.storage.errors import ConcurrencyError, StorageError
from service.telemetry.metrics import LedgerMetrics

log = logging.getLogger(__name__)

LEDGER = "deliveries"
WRITE_ATTEMPTS = 5


class RecordUnavailable(StorageError):
    """The record could not be read, parsed or written now: whatever depended on it fails closed."""


@dataclass
class HostRecords:
    backend: MemoryBackend
    metrics: LedgerMetrics
    _cache: dict[str, tuple[HostRecord, str]] = field(
        default_factory=dict
    )  # host -> (record, its ETag)

    def cached(self, host_id: str) -> HostRecord | None:
        held = self._cache.get(host_id)
        return held[0] if held is not None else None

    def forget(self, host_id: str) -> None:
        self._cache.pop(host_id, None)

    async def read(self, host_id: str) -> HostRecord:
        """The stored record (an empty one when the host has none yet), refreshing the cache."""
        record, _ = await self._read(host_id)
        return record

    async def hosts(self) -> list[str]:
        return [
            h
            for key in await self.backend.list(RECORD_PREFIX)
            if (h := host_of_record_key(key)) is not None
        ]

    async def update(self, host_id: str, change: Callable[[HostRecord], HostRecord]) -> HostRecord:
        """Apply ``change`` and store the result; the record as stored. Raises RecordUnavailable."""
        held = self._cache.get(host_id)
        current, etag = held if held is not None else await self._read(host_id)
        for _ in range(WRITE_ATTEMPTS):
            changed = change(current)
            if changed == current:
                return current
            try:
                new_etag = await self.backend.write_text(
                    record_key(host_id),
                    render_host_record(changed),
                    **({"if_match": etag} if etag else {"if_absent": True}),
                )
            except StorageError as exc:
                if isinstance(exc, ConcurrencyError):
                    self.metrics.cas_conflicts.labels(ledger=LEDGER).inc()
                self._cache.pop(host_id, None)
                current, etag = await self._read(
                    host_id
                )  # settles an unknown outcome too: re-applied
                continue
            self._cache[host_id] = (changed, new_etag)
            return changed
        raise RecordUnavailable(f"delivery record of host {host_id!r}: every write lost a race")

    async def _read(self, host_id: str) -> tuple[HostRecord, str]:
        """(record, ETag); ETag "" when absent (the first write is if_absent)."""
        try:
            read = await read_parsed(self.backend, record_key(host_id), parse_host_record)
        except StorageError as exc:
            raise RecordUnavailable(
                f"delivery record of host {host_id!r} unreadable ({type(exc).__name__})"
            ) from exc
        if read.outcome is ReadOutcome.ABSENT:
            self._cache.pop(host_id, None)
            return empty_record(host_id), ""
        if read.outcome is ReadOutcome.UNRESOLVED or read.value is None or read.etag is None:
            self._cache.pop(host_id, None)
            log.error(
                "delivery record unreadable; this host takes no new claims until it is",
                extra={"host_id": host_id, "reason": read.why},
            )
            raise RecordUnavailable(f"delivery record of host {host_id!r} unreadable ({read.why})")
        self._cache[host_id] = (read.value, read.etag)
        return read.value, read.etag

    async def owe(self, host_id: str, messages: Sequence[InboundMessage], at: datetime) -> bool:
        """Claimed messages this host did not get (a sponsor wait of its ended without answering), owed
        to it from now on. False only when they are certainly not in its record; a write whose fate
        stays unknown counts as written (fail closed: given to another host too, the message could
        reach two)."""
        keys = {m.key for m in messages}
        claim = f"wait-{uuid.uuid4().hex}"
        try:
            await self.update(host_id, lambda r: owed_after_claim(r, claim, messages, at))
        except StorageError:
            try:
                record = await self.read(host_id)
            except StorageError:
                log.error(
                    "a sponsor wait's messages may or may not be owed to its host; not given to another",
                    extra={"host_id": host_id, "message_ids": [m.message_id for m in messages]},
                )
                return True
            return keys <= {e.key for e in record.pending} | record.settled_keys()
        return True

    async def release_hold(self, host_id: str, session_id: str, now: datetime) -> None:
        """Best effort: a host whose session ended here is not held by it any more (the sweep moves what
        it is owed to another host only once nobody holds it)."""

        def change(r: HostRecord) -> HostRecord:
            holder = r.held_by
            if holder is None or holder.session != session_id or not holder.active:
                return r
            return held(r, holder.model_copy(update={"active": False, "at": now}))

        try:
            await self.update(host_id, change)
        except StorageError:
            pass
        self.forget(host_id)

"""A host's acknowledgements, written to its delivery record in batches.

A bridge acknowledges each message as it writes it to its host; while one write to the host's record
is in flight, the acknowledgements that arrive meanwhile wait and go in the next one. Only what the
write that landed took out of the record counts as delivered: a repeated acknowledgement, or one
another replica wrote first, finds nothing left to take.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from service.background import Background
from service.delivery.host_record import HostRecord, PendingDelivery, acknowledged
from service.delivery.host_records import HostRecords
from service.domain.message import MessageKey
from service.storage.errors import StorageError

log = logging.getLogger(__name__)

# (host id, the keys written, the entries that write took out of the record)
Written = Callable[[str, set[MessageKey], list[PendingDelivery]], None]


@dataclass
class AckWriter:
    records: HostRecords
    background: Background
    written: Written
    _queued: dict[str, list[MessageKey]] = field(default_factory=dict)  # host -> to write, in order
    _writers: dict[str, asyncio.Task[None]] = field(default_factory=dict)

    def add(self, host_id: str, keys: Iterable[tuple[str, str]]) -> None:
        self._queued.setdefault(host_id, []).extend(MessageKey(*k) for k in keys)
        writer = self._writers.get(host_id)
        if writer is None or writer.done():
            self._writers[host_id] = self.background.spawn(
                self._write(host_id), name="keeper:acknowledgements"
            )

    async def _write(self, host_id: str) -> None:
        while self._queued.get(host_id):
            keys = set(self._queued.pop(host_id))
            taken: list[PendingDelivery] = []

            def change(r: HostRecord) -> HostRecord:
                # Applied to the record each attempt read; the write that lands is the one applied last, so
                # ``taken`` ends as what this replica's write took out of ``pending`` (none when another
                # write, or an earlier attempt of this one whose answer was lost, already had).
                taken[:] = [e for e in r.pending if e.key in keys]
                return acknowledged(r, keys)

            try:
                await self.records.update(host_id, change)
            except StorageError as exc:
                log.warning(
                    "acknowledgements not written; the host is pushed these again and acknowledges again",
                    extra={"host_id": host_id, "count": len(keys), "error": type(exc).__name__},
                )
                return
            self.written(host_id, keys, taken)

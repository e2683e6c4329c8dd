"""Pre-seed a fleet's container so replicas start on a tenant the fleet already knows: the shared
watched list holding every chat, and one cursor per chat as first sight of an empty chat leaves it.

Without it, a fleet starting on 10,000 chats would spend its first minutes (and Graph's budget)
discovering and first-sighting every chat, which is not what the benchmark measures. The records are
written through the ledger's own code (``WatchedChats.add``, ``baseline_cursor`` rendered by
``render_chat_cursor`` at ``cursor_key``), so they are exactly what first sight would have written.
The cursors are created with ``if_absent`` directly rather than through ``ChatLedger.bootstrap``,
whose read-then-create costs two requests per chat: one create is enough on a fresh container.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from service.clock import utc_now
from service.domain.conversation import TEAMS_CHATS
from service.ledger.claims.chat_cursor import baseline_cursor, render_chat_cursor
from service.ledger.memory.watched_chats import WatchedChats, WatchOutcome
from service.storage.backend import MemoryBackend
from service.storage.errors import ConcurrencyError
from service.telemetry.metrics import LedgerMetrics

CONCURRENCY = 32  # Azurite answers small writes in a few ms; more in flight only queues there


@dataclass(frozen=True)
class Preseeded:
    chats: int
    cursors_written: int
    cursors_present: int  # already there (a re-run on the same container)
    seconds: float


async def preseed_ledger(
    backend: MemoryBackend,
    chat_ids: Sequence[str],
    *,
    now: datetime | None = None,
    concurrency: int = CONCURRENCY,
) -> Preseeded:
    """Write the watched list and an empty-chat cursor for every chat in ``chat_ids``."""
    began = time.monotonic()
    watched = await WatchedChats(backend, metrics=LedgerMetrics()).add(chat_ids)
    if watched is WatchOutcome.FAILED:
        raise RuntimeError(
            "could not write the watched chat list to the benchmark's container; see the log"
        )
    text = render_chat_cursor(baseline_cursor([], now=now or utc_now()))
    limit = asyncio.Semaphore(concurrency)

    async def create(chat_id: str) -> bool:
        async with limit:
            try:
                await backend.write_text(TEAMS_CHATS.cursor_key(chat_id), text, if_absent=True)
            except ConcurrencyError:
                return False
            return True

    written = await asyncio.gather(*(create(c) for c in chat_ids))
    created = sum(written)
    return Preseeded(
        len(chat_ids), created, len(chat_ids) - created, round(time.monotonic() - began, 2)
    )

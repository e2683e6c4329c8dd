"""How a fleet role that finds changed chats (the scanner, the sweep) hands them to the readers:
the chats it found unwatched get their first watch (their cursor starts) and go on the watched list,
then the hints are written — each only while its lease is held, so a former holder never writes
beside its successor (SPEC §9)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from enum import Enum

from service.graph.models import Chat
from service.ledger.fleet.hints import Hint, HintLog
from service.ledger.fleet.leases import Lease
from service.ledger.memory.watched_chats import WatchedChats
from service.storage.errors import StorageError
from service.telemetry.metrics import ChangeMetrics
from service.workers.first_watch import FirstWatch

log = logging.getLogger(__name__)


class Published(Enum):
    WRITTEN = "written"  # the hints (if any) are in the log
    LEASE_LOST = "lease_lost"  # nothing was written after the lease was found gone
    HINTS_UNWRITTEN = "hints_unwritten"  # the store refused the hints: the role offers them again


async def publish_hints(
    lease: Lease,
    watched: WatchedChats,
    hint_log: HintLog,
    *,
    source: str,
    unwatched: Sequence[Chat],
    hints: Sequence[Hint],
    metrics: ChangeMetrics,
    first_watch: FirstWatch | None,
) -> Published:
    """``first_watch``: None when the role started the unwatched chats' cursors itself."""
    if not lease.held():
        return Published.LEASE_LOST
    if unwatched:
        if first_watch is not None:
            # Before the list: a replica that finds a chat watched finds its cursor too, and no
            # reader makes a first sight of a chat the fleet is watching already.
            await first_watch.start(unwatched)
        try:
            await watched.add(chat.id for chat in unwatched)
        except StorageError as exc:
            # Their hints are written anyway: a reader that does not watch the chat yet skips the
            # hint, and discovery, the scanner or the sweep adds it later.
            log.warning(
                "could not add found chats to the watched list",
                extra={"source": source, "chats": len(unwatched), "error": type(exc).__name__},
            )
    if not hints:
        return Published.WRITTEN
    if not lease.held():  # the watched-list write may have outlasted it
        return Published.LEASE_LOST
    try:
        await hint_log.add(hints)
    except StorageError as exc:
        log.warning(
            "chat hints not written; offered again next time",
            extra={"source": source, "hints": len(hints), "error": type(exc).__name__},
        )
        return Published.HINTS_UNWRITTEN
    metrics.chat_hints_written.labels(source=source).inc(len(hints))
    return Published.WRITTEN

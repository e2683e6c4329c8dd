"""The shared list of one kind's watched conversations (``watched_chats`` for chats, the kind's
``watched_key`` for others: one id per line, sorted).

The list only grows: adding merges into what is stored under compare-and-swap, so no replica can
remove another's chats. A chat whose write failed stays in ``dirty`` and goes out with the next
``add`` (the discovery sweep calls it every time, new chats or not), because discovery only
registers chats that are not in memory yet. An unreadable list is never replaced by a local copy:
the replica starts with no chats and loads again later.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from enum import Enum

from service.domain.conversation import TEAMS_CHATS, ConversationKind
from service.ledger.records.cas import UpdateOutcome, count_conflicts, update_value
from service.ledger.records.reads import CorruptValueError, ReadOutcome, read_parsed
from service.storage.backend import MemoryBackend
from service.telemetry.metrics import LedgerMetrics

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 4


def parse_watched_chats(text: str) -> frozenset[str]:
    """The chat ids in ``text``; an id never holds whitespace or markup, so an error page is corrupt."""
    ids = [line.strip() for line in text.splitlines() if line.strip()]
    for chat_id in ids:
        if (
            any(ch.isspace() for ch in chat_id)
            or chat_id.startswith("<")
            or not chat_id.isprintable()
        ):
            raise CorruptValueError("watched_chats holds a line that is not a chat id")
    return frozenset(ids)


def render_watched_chats(chat_ids: Iterable[str]) -> str:
    return "".join(f"{chat_id}\n" for chat_id in sorted(set(chat_ids)))


class WatchOutcome(str, Enum):
    WRITTEN = "written"  # the list now holds every chat we know of
    UNCHANGED = "unchanged"  # it already did; nothing written
    FAILED = (
        "failed"  # not written (unreadable, corrupt, conflicts or errors): the chats stay dirty
    )


class WatchedChats:
    """This replica's view of the watched list, and the chats it still has to write."""

    def __init__(
        self,
        backend: MemoryBackend,
        *,
        metrics: LedgerMetrics,
        kind: ConversationKind = TEAMS_CHATS,
        max_attempts: int = MAX_ATTEMPTS,
    ) -> None:
        self._backend = backend
        self.kind = kind
        self._key = kind.watched_key
        self._metrics = metrics
        self._max_attempts = max_attempts
        self._chats: set[str] = set()
        self._dirty: set[str] = set()
        self.last_load: ReadOutcome | None = None

    @property
    def chats(self) -> frozenset[str]:
        return frozenset(self._chats)

    @property
    def dirty(self) -> frozenset[str]:
        return frozenset(self._dirty)

    @property
    def needs_load(self) -> bool:
        """True until a load has answered PRESENT or ABSENT."""
        return self.last_load in (None, ReadOutcome.UNRESOLVED)

    def __contains__(self, chat_id: object) -> bool:
        return chat_id in self._chats

    def __len__(self) -> int:
        """The list only grows (chats are never removed), so an unchanged length is an unchanged list."""
        return len(self._chats)

    async def load(self) -> ReadOutcome:
        """Learn the stored list; UNRESOLVED keeps what is in memory (empty at start) for a later retry."""
        read = await read_parsed(self._backend, self._key, parse_watched_chats)
        self.last_load = read.outcome
        if read.outcome is ReadOutcome.PRESENT:
            assert read.value is not None
            self._learn(read.value)
        elif read.outcome is ReadOutcome.UNRESOLVED:
            log.warning(
                "watched %s list unreadable (%s); watching %d until it loads",
                self.kind.name,
                read.why,
                len(self._chats),
            )
        return read.outcome

    async def add(self, chat_ids: Iterable[str] = ()) -> WatchOutcome:
        """Register ``chat_ids`` now, and write them together with every dirty chat in one merge."""
        new = {chat_id for chat_id in chat_ids if chat_id}
        self._chats |= new
        self._dirty |= new
        if not self._dirty:
            return WatchOutcome.UNCHANGED
        wanted = frozenset(self._dirty)

        def merged(current: frozenset[str] | None) -> str | None:
            stored = current or frozenset()
            return None if wanted <= stored else render_watched_chats(stored | wanted)

        update = await update_value(
            self._backend,
            self._key,
            parse=parse_watched_chats,
            change=merged,
            attempts=self._max_attempts,
        )
        count_conflicts(self._metrics, self._key, update)
        if not update.holds:
            log.warning(
                "watched %s list not written (%s); %d stay dirty for the next sweep",
                self.kind.name,
                update.outcome.value,
                len(self._dirty),
            )
            self._publish()
            return WatchOutcome.FAILED
        self._dirty -= wanted
        if update.value is not None:
            self._learn(update.value)
        return (
            WatchOutcome.WRITTEN
            if update.outcome is UpdateOutcome.WRITTEN
            else WatchOutcome.UNCHANGED
        )

    def _learn(self, stored: frozenset[str]) -> None:
        self._chats |= stored
        self._publish()

    def _publish(self) -> None:
        self._metrics.watched(self.kind.name).set(len(self._chats))

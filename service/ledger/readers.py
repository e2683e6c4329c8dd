"""Which replicas read chats: each replica with a chat target says so in ``readers/<replica>.json``
every ``HEARTBEAT``, and reads the others' records as often, so that every replica taking the same
hint can tell its turn for that chat.

The turn decides only *when* a replica looks at a hinted chat: the first in turn reads at once, the
next one a gap later, by which time the first one's claim is in the chat cursor and the cursor read
spares it the Graph read. A stale or missing record costs latency (a replica waits for a turn that
does not come), never a message: every replica still reads the chat itself after its turn.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from service.clock import Clock, format_timestamp, parse_timestamp, utc_now
from service.storage.backend import MemoryBackend
from service.storage.errors import StorageError

log = logging.getLogger(__name__)

PREFIX = "readers/"
HEARTBEAT = timedelta(seconds=10)
STALE_AFTER = timedelta(seconds=25)  # two heartbeats missed, plus a little clock skew
# Two replicas whose hosts connect together may each list the roster before the other's record says
# it reads, and each take every first turn. A replica lists again this much after it first reads, and
# takes no turn until then.
SETTLE_S = 2.0


def reader_key(replica_id: str) -> str:
    return f"{PREFIX}{replica_id}.json"


def turn_key(replica_id: str, chat_id: str) -> bytes:
    return hashlib.blake2b(f"{replica_id}\0{chat_id}".encode(), digest_size=8).digest()


def turn_of(me: str, readers: frozenset[str], chat_id: str) -> int:
    """This replica's place among the readers for ``chat_id`` (0: first); a different order per chat,
    so no replica reads every chat first."""
    ahead = {r for r in readers if r != me}
    mine = turn_key(me, chat_id)
    return sum(1 for r in ahead if turn_key(r, chat_id) < mine)


@dataclass
class ReaderRoster:
    backend: MemoryBackend
    replica_id: str
    clock: Clock = utc_now
    readers: frozenset[str] = frozenset()  # the live readers as last listed (self included when reading)
    _next_beat: float = float("-inf")
    _reading: bool | None = None
    _settled_at: float = float("inf")  # monotonic: when this replica's view may be trusted for turns
    _ever_read: bool = False

    async def refresh(self, reading: bool, now_s: float) -> None:
        """Heartbeat and re-list when due (or at once when this replica started or stopped reading).
        A store that does not answer keeps the last view: turns are only about latency."""
        if now_s < self._next_beat and reading == self._reading:
            return
        # Only the first time this replica reads: one whose short sponsor waits come and go must not
        # pause its reads each time (the others have listed it by then).
        first = reading and not self._ever_read
        self._next_beat = now_s + (SETTLE_S if first else HEARTBEAT.total_seconds())
        if first:
            self._ever_read, self._settled_at = True, now_s + SETTLE_S
        self._reading = reading
        now = self.clock()
        try:
            await self.backend.write_text(reader_key(self.replica_id), json.dumps(
                {"replica": self.replica_id, "at": format_timestamp(now), "reading": reading}))
            live: set[str] = set()
            for key in await self.backend.list(PREFIX):
                record = _parse(await self.backend.read_text(key))
                if record is not None and record[1] and now - record[2] < STALE_AFTER:
                    live.add(record[0])
        except StorageError as exc:
            log.warning("reader roster not refreshed; keeping the last one", extra={"error": type(exc).__name__})
            return
        self.readers = frozenset(live | ({self.replica_id} if reading else set()))

    async def leave(self) -> None:
        """Stopping: no longer a reader (best effort; a record left behind goes stale)."""
        self._reading = False
        try:
            await self.backend.write_text(reader_key(self.replica_id), json.dumps(
                {"replica": self.replica_id, "at": format_timestamp(self.clock()), "reading": False}))
        except StorageError as exc:
            log.warning("reader record not withdrawn; it goes stale", extra={"error": type(exc).__name__})

    def settled(self, now_s: float) -> bool:
        """Whether this replica has been reading long enough for its view of the others to hold."""
        return now_s >= self._settled_at

    def turn(self, chat_id: str) -> int:
        return turn_of(self.replica_id, self.readers, chat_id)


def _parse(text: str | None) -> tuple[str, bool, datetime] | None:
    """(replica, reading, at) or None for a record that is not one (skipped: it only costs a turn)."""
    if text is None:
        return None
    try:
        obj = json.loads(text)
        return str(obj["replica"]), bool(obj["reading"]), parse_timestamp(obj["at"])
    except (ValueError, KeyError, TypeError):
        return None

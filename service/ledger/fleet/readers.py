"""Which replicas read chats: each replica with a chat target says so in the one roster blob
``readers/roster.json`` every ``HEARTBEAT``, and learns the others from the same read, so that every
replica taking the same hint can tell its turn for that chat.

The turn decides only *when* a replica looks at a hinted chat: the first in turn reads at once, the
next one a gap later, by which time the first one's claim is in the chat cursor and the cursor read
spares it the Graph read. A stale or missing entry costs latency (a replica waits for a turn that
does not come), never a message: every replica still reads the chat itself after its turn.

One roster blob, updated with If-Match, rather than a record per replica: a heartbeat then costs one
read and one write whatever the number of replicas that ever ran, and whoever writes drops the
entries gone stale, so pods that died leave nothing behind to read (records per replica grew with
every pod, and every heartbeat read them all). The price is contention on one blob: a few replicas
writing every 10 s are far below what one blob takes (~22 CAS updates/s measured on Azurite), and a
heartbeat that keeps losing the race keeps its last view, which only costs turns.

The order of turns depends on the chat and on the ``TURN_WINDOW`` the hinted message was written in,
so that over time each replica is first for a fair share of every chat's messages (a fixed order per
chat gave one replica every message of the chats where it came first: all of them, in a 3-chat
demo). Not a new order per message: Graph allows one read a second per chat for the whole app, and
only the first reader's own pacing keeps its successive reads of a busy chat apart, so the first
reader changes at most once a window (an order per message id drew five per-chat 429s in the fleet's
unordered-tenant run). Every replica taking the same hint computes the same order.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from service.clock import Clock, format_timestamp, parse_timestamp, utc_now
from service.ledger.records.cas import UpdateOutcome, update_value
from service.ledger.records.reads import CorruptValueError
from service.storage.backend import MemoryBackend

log = logging.getLogger(__name__)

PREFIX = "readers/"
ROSTER_KEY = f"{PREFIX}roster.json"
HEARTBEAT = timedelta(seconds=10)
STALE_AFTER = timedelta(seconds=25)  # two heartbeats missed, plus a little clock skew
# Two replicas whose hosts connect together may each list the roster before the other's record says
# it reads, and each take every first turn. A replica lists again this much after it first reads, and
# takes no turn until then.
SETTLE_S = 2.0
TURN_WINDOW = timedelta(seconds=30)
_WRITE_ATTEMPTS = (
    3  # every replica writes the one blob each heartbeat: a lost race re-reads and retries
)


def turn_key(replica_id: str, chat_id: str, hint: str) -> bytes:
    return hashlib.blake2b(f"{replica_id}\0{chat_id}\0{hint}".encode(), digest_size=8).digest()


def turn_window(newest: datetime | None) -> str:
    """The part of a hint the turn order depends on: the window its message was written in (by the
    message's own time, the same on every replica), or "" for a hint without one."""
    if newest is None:
        return ""
    return str(int(newest.timestamp() // TURN_WINDOW.total_seconds()))


def turn_of(me: str, readers: frozenset[str], chat_id: str, hint: str = "") -> int:
    """This replica's place among the readers for ``chat_id`` and ``hint`` (its ``turn_window``; 0: first)."""
    ahead = {r for r in readers if r != me}
    mine = turn_key(me, chat_id, hint)
    return sum(1 for r in ahead if turn_key(r, chat_id, hint) < mine)


@dataclass(frozen=True, slots=True)
class ReaderEntry:
    at: datetime
    reading: bool


def parse_roster(text: str) -> dict[str, ReaderEntry]:
    try:
        obj = json.loads(text)
        return {
            str(replica): ReaderEntry(parse_timestamp(entry["at"]), bool(entry["reading"]))
            for replica, entry in obj["readers"].items()
        }
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CorruptValueError(f"reader roster: {exc}") from exc


def render_roster(entries: dict[str, ReaderEntry]) -> str:
    return json.dumps(
        {
            "readers": {
                replica: {"at": format_timestamp(e.at), "reading": e.reading}
                for replica, e in sorted(entries.items())
            }
        },
        sort_keys=True,
    )


def with_entry(
    stored: dict[str, ReaderEntry] | None, replica_id: str, entry: ReaderEntry | None, now: datetime
) -> dict[str, ReaderEntry]:
    """The roster with our entry set (or removed when None) and every stale entry dropped."""
    kept = {r: e for r, e in (stored or {}).items() if r != replica_id and now - e.at < STALE_AFTER}
    if entry is not None:
        kept[replica_id] = entry
    return kept


def live_readers(entries: dict[str, ReaderEntry], now: datetime) -> set[str]:
    return {r for r, e in entries.items() if e.reading and now - e.at < STALE_AFTER}


@dataclass
class ReaderRoster:
    backend: MemoryBackend
    replica_id: str
    clock: Clock = utc_now
    readers: frozenset[str] = (
        frozenset()
    )  # the live readers as last listed (self included when reading)
    _next_beat: float = float("-inf")
    _reading: bool | None = None
    _settled_at: float = float(
        "inf"
    )  # monotonic: when this replica's view may be trusted for turns
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
        entries = await self._store(ReaderEntry(now, reading), now)
        if entries is None:
            return
        self.readers = frozenset(
            live_readers(entries, now) | ({self.replica_id} if reading else set())
        )

    async def leave(self) -> None:
        """Stopping: no longer a reader (best effort; an entry left behind goes stale and is dropped)."""
        self._reading = False
        await self._store(None, self.clock())

    async def _store(
        self, entry: ReaderEntry | None, now: datetime
    ) -> dict[str, ReaderEntry] | None:
        """Write our entry into the roster; the roster as written, or None (logged) when it could not be.
        A corrupt roster is replaced: it holds nothing a heartbeat would not rebuild within STALE_AFTER."""
        update = await update_value(
            self.backend,
            ROSTER_KEY,
            parse=_parse_or_empty,
            change=lambda stored: render_roster(with_entry(stored, self.replica_id, entry, now)),
            attempts=_WRITE_ATTEMPTS,
        )
        if update.outcome is not UpdateOutcome.WRITTEN or update.value is None:
            log.warning(
                "reader roster not refreshed; keeping the last one",
                extra={"outcome": update.outcome.value},
            )
            return None
        return update.value

    def settled(self, now_s: float) -> bool:
        """Whether this replica has been reading long enough for its view of the others to hold."""
        return now_s >= self._settled_at

    def turn(self, chat_id: str, newest: datetime | None = None) -> int:
        """This replica's turn for a hint of ``chat_id`` whose message was written at ``newest``."""
        return turn_of(self.replica_id, self.readers, chat_id, turn_window(newest))


def _parse_or_empty(text: str) -> dict[str, ReaderEntry]:
    try:
        return parse_roster(text)
    except CorruptValueError:
        log.warning("reader roster corrupt; rewriting it", extra={"key": ROSTER_KEY})
        return {}

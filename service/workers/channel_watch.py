"""The fleet's channel watch: one replica (the ``channel_watch`` lease) finds the agent user's team
channels and has each one looked at in turn (SPEC §9, for the second kind of conversation).

- **Discovery.** Every ``discover_every_s``: ``/me/joinedTeams`` and each team's ``/channels``, so a
  channel added after start (or a team the agent joined) is watched within one interval. A channel the
  walk finds unwatched gets its first watch before it joins the list: its cursor starts at its newest
  message, replies included, and is never surfaced (a channel's first sight never replays history), so
  everything written in it from then on is decided by the ordinary claims, host or no host.
- **Rotation.** Graph has no cheap "which channels changed" listing for a user's channels (the
  tenant-wide ``getAllMessages`` is application-only and metered), so the watch hints the watched
  channels in turn, ``reads_per_s`` of them a second, and the reader whose turn it is reads each one's
  delta since its cursor: one Graph request per channel per rotation for the whole fleet, whatever the
  replica count (only the replica first in turn reads a rotation hint: service.workers.chat_wants). A hint is only a reason to look (it carries no message), so this role can cause delay,
  never a duplicate.

Both act only while the lease is held; a new holder starts the rotation over (a channel hinted twice
costs one delta read).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from service.clock import Clock, utc_now
from service.domain.channel_place import channel_conversation_id
from service.graph.client import GraphClient
from service.graph.errors import GraphError
from service.ledger.claims.chat_cursor import Candidate
from service.ledger.claims.chat_ledger import ChatLedger
from service.ledger.fleet.hints import Hint, HintLog
from service.ledger.fleet.leases import Lease
from service.ledger.memory.watched_chats import WatchedChats
from service.storage.errors import StorageError
from service.telemetry.metrics import ChangeMetrics
from service.workers.channel_names import ChannelNames
from service.workers.channel_reader import ChannelMessagesReader
from service.workers.chat_state import OfferedMessage
from service.workers.chat_wants import ROTATION_SOURCE

log = logging.getLogger(__name__)

ROLE = "channel_watch"
# New channels given their first watch per walk, each at most this often: a first watch reads the
# channel's roots and maybe a thread's replies, and Graph limits reads per team and channel (the
# emulator's Teams budget answered 429s to a cold start's 20 channels of a team read back to back).
# A walk that found more goes on one second later; within the lease's 30 s either way.
FIRST_WATCHES_PER_WALK = 20
FIRST_WATCH_GAP_S = 0.5
HINT_SOURCE = ROTATION_SOURCE


@dataclass
class Rotation:
    """Which watched channels are due for a look: ``per_s`` a second, in turn, none skipped."""

    per_s: float  # Settings.channel_reads_per_s
    _order: list[str] = field(default_factory=list)
    _owed: float = 0.0  # channels due, fractional
    _last_tick: float | None = None

    def restart(self) -> None:
        self._order, self._owed, self._last_tick = [], 0.0, None

    def due(self, now: float, watched: frozenset[str]) -> list[str]:
        """The channels due by ``now``; ``taken`` must follow once their hints are written."""
        elapsed = 0.0 if self._last_tick is None else max(now - self._last_tick, 0.0)
        self._last_tick = now
        # Never owed more than one whole rotation: a pause (a lost lease, a slow store) is not caught
        # up in a burst of reads.
        self._owed = min(self._owed + elapsed * self.per_s, float(max(len(watched), 1)))
        picked: list[str] = []
        for _ in range(min(int(self._owed), len(watched))):
            if not self._order:
                self._order = sorted(watched, reverse=True)
            picked.append(self._order.pop())
        return picked

    def taken(self, count: int) -> None:
        self._owed -= count


@dataclass
class Walk:
    """The discovery walks' state on the holder."""

    next_at: float = 0.0  # monotonic
    # What the last complete walk found; None before one: a watched channel it did not find (deleted,
    # or the agent left it) is not hinted.
    found: frozenset[str] | None = None
    more_to_start: bool = False  # the last walk left new channels for the next


@dataclass
class ChannelWatch:
    graph: GraphClient
    lease: Lease
    hint_log: HintLog
    watched: WatchedChats  # of TEAM_CHANNELS
    ledger: ChatLedger[OfferedMessage]  # of TEAM_CHANNELS
    reader: ChannelMessagesReader
    names: ChannelNames
    metrics: ChangeMetrics
    discover_every_s: float  # Settings.channel_discovery_interval_s
    rotation: Rotation
    clock: Clock = utc_now
    monotonic: Callable[[], float] = time.monotonic
    _walk: Walk = field(default_factory=lambda: Walk(), init=False)
    _held_epoch: object = field(default=None, init=False)

    async def cycle(self) -> None:
        if not await self.lease.keep():
            self._held_epoch = None
            self.rotation.restart()
            return
        now = self.monotonic()
        if self._held_epoch != self.lease.epoch:
            self._held_epoch, self._walk.next_at = self.lease.epoch, 0.0
            self.rotation.restart()
        if now >= self._walk.next_at:
            await self.discover()
            self._walk.next_at = now + (1.0 if self._walk.more_to_start else self.discover_every_s)
        await self._rotate(now)

    async def discover(self) -> int:
        """Walk the teams and their channels; start and list the new ones (while the lease is held).
        Returns how many."""
        found: list[str] = []
        await self.watched.load()  # another holder's finds since this replica last looked
        try:
            teams = await self.graph.channels.joined_teams()
            for team in teams:
                channels = await self.graph.channels.list_channels(team.id)
                self.names.learn(
                    team.id, team.display_name, {c.id: c.display_name for c in channels}
                )
                found += [channel_conversation_id(team.id, c.id) for c in channels]
            self._walk.found = frozenset(found)
        except GraphError as exc:
            # What was found before the failure is watched; the rest waits for the next walk.
            log.warning(
                "channel discovery stopped early; walked again next interval",
                extra={"error": type(exc).__name__, "status": exc.status},
            )
        new = [c for c in found if c not in self.watched]
        self._walk.more_to_start = len(new) > FIRST_WATCHES_PER_WALK
        if not new or not self.lease.held():
            return 0
        started = []
        for i, conversation in enumerate(new[:FIRST_WATCHES_PER_WALK]):
            if i:
                await asyncio.sleep(FIRST_WATCH_GAP_S)
            if not self.lease.held():
                break
            if await self._first_watch(conversation):
                started.append(conversation)
        if started:
            try:
                await self.watched.add(started)
            except StorageError as exc:
                log.warning(
                    "could not add found channels to the watched list",
                    extra={"channels": len(started), "error": type(exc).__name__},
                )
        return len(started)

    async def _first_watch(self, conversation_id: str) -> bool:
        """Start the channel's cursor at its newest message (never surfaced); False when it could not
        be started, so the channel is not listed and the next walk tries again."""
        try:
            newest = await self.reader.newest(conversation_id)
            update = await self.ledger.start_watched_chat(
                conversation_id,
                Candidate(newest.id, newest.created_date_time) if newest is not None else None,
                surface_newest=False,
            )
        except (GraphError, StorageError) as exc:
            log.warning(
                "channel's first watch wrote no cursor; tried again next walk",
                extra={"channel": conversation_id, "error": type(exc).__name__},
            )
            return False
        # A cursor another replica wrote first holds as well as ours.
        return update.holds or update.value is not None

    async def _rotate(self, now: float) -> None:
        watched = self.watched.chats
        picked = self.rotation.due(
            now, watched if self._walk.found is None else watched & self._walk.found
        )
        if not picked or not self.lease.held():
            return
        at = self.clock()
        try:
            await self.hint_log.add(
                Hint(c, at, source=HINT_SOURCE, kind=self.ledger.kind.hint_tag) for c in picked
            )
        except StorageError as exc:
            log.warning(
                "channel hints not written; their channels come round again",
                extra={"hints": len(picked), "error": type(exc).__name__},
            )
            return
        self.rotation.taken(len(picked))
        self.metrics.chat_hints_written.labels(source=f"channel_{HINT_SOURCE}").inc(len(picked))

"""Discovery: the agent user's chats from ``GET /me/chats``, merged into the shared watched list, and
their members into the shared members snapshot that every replica's SponsorGate learns from. A chat
the walk finds unwatched gets its first watch (service.workers.first_watch) just before it joins the
list: its cursor starts from the page's preview, host or no host, so what is written in it from then
on reaches the first host.

Graph's budget is per app per tenant (SPEC §9), so the walk is a fleet-singleton role: only the
replica holding the ``discovery`` lease walks ``/me/chats?$expand=members``; the fleet costs Graph
the same at 1 replica or 10. Every replica (holder or not) re-reads the watched list and the members
snapshot (one blob read each) at the discovery interval, and has its SponsorRefresher re-read the
sponsors when due (every sponsor refresh interval): this cycle runs on every replica, only the walk is
the holder's.

The cycle runs at the lease's renewal cadence (``interval_s``): renew, and act only while held. The
walk is paced: at most ``pages_per_walk`` quiet pages of 50 chats per discovery interval (pages that
find chats not yet watched go on at one a second), resumed where the last one stopped (the
``@odata.nextLink`` kept in memory), so a steady fleet's 10,000 chats (200 pages) cost the same
request rate as 1,000. Between pages the walk renews the lease when due and stops at once when it
no longer holds it. Pages read before a failure are kept; one write for the new chats of each
``REGISTER_EVERY_PAGES`` pages plus the dirty ones.

The walk is agent-user mode's only (``walks``): in delegated mode ``/me/chats`` is the human's.
"""

from __future__ import annotations

import asyncio

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from service.delivery.sponsor_refresh import SponsorRefresher
from service.domain.sponsors import SponsorGate
from service.graph.client import GraphClient
from service.graph.errors import GraphConnectionError, GraphError, GraphServerError, GraphThrottled
from service.graph.models import Chat
from service.ledger.memory.watched_chats import WatchedChats, WatchOutcome
from service.ledger.records.reads import ReadOutcome
from service.ledger.memory.chat_members import ChatMembers, SnapshotLoad, known_members
from service.ledger.fleet.leases import Lease
from service.telemetry.metrics import ChangeMetrics
from service.workers.first_watch import FirstWatch

log = logging.getLogger(__name__)

ROLE = "discovery"
# Quiet pages per walk step (pages whose chats are all watched already): 10 x 50 = 500 chats per
# interval; more chats resume the next interval (1,000 chats take two, 10,000 twenty). At the default
# 120 s a steady fleet's discovery stays at or under 10 / 120 s = 0.083 list-chats req/s whatever the
# chat count, so an idle fleet (this, the 3 s scan, the sweep) stays under 0.5 req/s (SPEC §9).
# Walking slowly costs little there: a chat with a new message is added at once by the scanner and
# the sweep; discovery adds the quiet ones and refreshes the members. A page that finds chats not yet
# watched (a cold start) does not count, so a new fleet's walk goes on at one page a second: 1,000
# chats in one step of 20 s, 10,000 in 200 s, registered every ``REGISTER_EVERY_PAGES``.
MAX_DISCOVERY_PAGES = 10
MAX_STEP_PAGES = 400  # 20,000 chats: a bound on one step however many pages find new chats
REGISTER_EVERY_PAGES = 20
PAGE_GAP_S = 1.0
# Resuming a walk an interval later relies on the @odata.nextLink staying usable. Read, not run:
# Graph's "Paging Microsoft Graph data in your app" documents no lifetime for it; a link Graph refuses
# (any answer but "later") restarts the walk from the first page. Chats that move between pages in
# the meantime may be missed by one pass; the next pass (and the chat scanner) finds them.
# Graph answered "later" (or nothing): the link it gave is still good, retry it next step.
_RETRY_SAME_PAGE = (GraphThrottled, GraphServerError, GraphConnectionError)


class WalkOutcome(str, Enum):
    COMPLETE = "complete"  # reached the last page; the next step starts again from the first
    PAUSED = "paused"  # the page cap: the next step resumes at the link where this one stopped
    FAILED = "failed"
    LEASE_LOST = "lease_lost"


@dataclass
class WalkProgress:
    """Where the holder's paced walk stands."""

    epoch: int | None = None  # the lease tenure this replica walks in
    resume: str | None = None  # where the paced walk goes on; None: from the first page
    next_step: float = float("-inf")
    # A first cycle ran (the one at the replica's start): a tenure taken later waits an interval.
    after_start: bool = False


@dataclass
class Discovery:
    graph: GraphClient
    watched: WatchedChats
    gate: SponsorGate
    lease: Lease  # role "discovery": only its holder walks /me/chats
    members: ChatMembers
    # Re-reads the sponsors into the gate when due; None (no agent identity): no sponsor is ever recognised.
    sponsors: SponsorRefresher | None = None
    # How often the holder takes a walk step, and every replica re-reads the watched list and the
    # members snapshot (ENTRABOT_DISCOVERY_INTERVAL_S).
    interval: float = 120.0
    pages_per_walk: int = MAX_DISCOVERY_PAGES
    metrics: ChangeMetrics = field(kw_only=True)
    first_watch: FirstWatch = field(kw_only=True)  # starts the cursor of each chat found unwatched
    # False in delegated mode: /me/chats is the signed-in person's, so nothing is walked or taken from it;
    # the watched list, the members snapshot and the chats the tools register are kept as ever.
    walks: bool = True
    monotonic: Callable[[], float] = time.monotonic
    _walk_progress: WalkProgress = field(default_factory=WalkProgress)
    _next_sync: float = field(default=float("-inf"))
    _renewed_at: float = field(default=float("-inf"))

    @property
    def interval_s(self) -> float:
        """The loop's cadence: the lease's, so the holder renews well before it expires."""
        return self.lease.renew_every.total_seconds()

    async def cycle(self) -> None:
        if self.walks:
            await self._renew()
        now = self.monotonic()
        sync = now >= self._next_sync
        if sync:
            self._next_sync = now + self.interval
            # Re-read the shared list: siblings add chats (create_chat, the holder's walk) in between.
            if await self.watched.load() is ReadOutcome.UNRESOLVED:
                log.warning("watched chat list unreadable; discovery will merge into it next sweep")
            await self._learn_members()
        if self.sponsors is not None:
            await self.sponsors.refresh_if_due()
        progress = self._walk_progress
        if not self.lease.held():
            progress.resume, progress.epoch = None, None  # a later holder starts its walk afresh
        elif progress.epoch != self.lease.epoch:
            progress.epoch = self.lease.epoch
            # Taken over while running: the former holder walked at most an interval and a lease ttl
            # ago, so this tenure's first step waits an interval (a step at once doubled the fleet's
            # discovery cost for that interval). At the replica's start it walks at once, as ever.
            progress.next_step = now + self.interval if progress.after_start else now
        if self.lease.held() and now >= progress.next_step:
            progress.next_step = now + self.interval
            await self._walk()
        if sync:
            await self._flush_dirty()
        progress.after_start = True

    async def register_chat(self, chat_id: str) -> WatchOutcome:
        """A chat created by a tool: watched at once, its members learnt here and shared with the fleet."""
        outcome = await self.watched.add([chat_id])
        try:
            members = known_members(await self.graph.chats.list_chat_members(chat_id))
        except GraphError:
            log.warning(
                "members of a new chat unreadable; the discovery walk learns them",
                extra={"chat_id": chat_id},
            )
            return outcome
        self.gate.refresh_chat(chat_id, members)
        await self.members.merge({chat_id: members})
        return outcome

    async def _walk(self) -> None:
        progress = self._walk_progress
        chats: list[Chat] = []
        outcome = WalkOutcome.PAUSED
        quiet_pages = 0
        for page_index in range(MAX_STEP_PAGES):
            if quiet_pages >= self.pages_per_walk:
                break
            if page_index:
                # Paced: list chats shares 5 requests a second per user with the scanner, the sweep
                # and the tools, for the whole fleet; an unpaced burst of 20 pages took them all (429s).
                await asyncio.sleep(PAGE_GAP_S)
            if not await self._still_holding():
                outcome = WalkOutcome.LEASE_LOST
                break
            try:
                page = await self.graph.chats.my_chats_page(progress.resume)
            except GraphError as exc:
                log.warning(
                    "chat discovery stopped after %d chat(s)",
                    len(chats),
                    extra={"error": type(exc).__name__, "status": exc.status},
                )
                if not isinstance(exc, _RETRY_SAME_PAGE):
                    progress.resume = None  # a link Graph no longer takes: start over next step
                outcome = WalkOutcome.FAILED
                break
            self.metrics.discovery_pages.inc()
            known = self.watched.chats
            if all(chat.id in known for chat in page.items):
                quiet_pages += 1
            chats.extend(page.items)
            progress.resume = page.next_link
            if page.next_link is None:
                outcome = WalkOutcome.COMPLETE
                break
            if (page_index + 1) % REGISTER_EVERY_PAGES == 0:
                await self._register(
                    chats
                )  # a long cold walk: the fleet reads these chats meanwhile
                chats = []
        self.metrics.discovery_walks.labels(outcome=outcome.value).inc()
        if not self.lease.held():
            progress.resume = None
            return  # stop at once: the role's writes are the next holder's
        await self._register(chats)

    async def _register(self, chats: list[Chat]) -> None:
        read = {chat.id: known_members(chat.members) for chat in chats if chat.members}
        for chat_id, members in read.items():
            self.gate.refresh_chat(chat_id, members)
        known = self.watched.chats
        found = [chat for chat in chats if chat.id not in known]
        # Before the list: a replica that finds a chat watched finds its cursor too.
        await self.first_watch.start(found)
        new = [chat.id for chat in found]
        outcome = await self.watched.add(new)
        if new:
            log.info("discovered chats", extra={"new": len(new), "outcome": outcome.value})
        await self.members.merge(read)

    async def _renew(self) -> None:
        self._renewed_at = self.monotonic()
        await self.lease.acquire_or_renew()

    async def _still_holding(self) -> bool:
        """Renew when due (a long walk outlasts one renewal period); whether the role is still ours."""
        if self.monotonic() - self._renewed_at >= self.interval_s:
            await self._renew()
        return self.lease.held()

    async def _learn_members(self) -> None:
        if await self.members.load() is not SnapshotLoad.CHANGED:
            return  # unchanged, absent, corrupt or unreadable: the gate keeps what it knew
        for chat_id, members in self.members.chats.items():
            self.gate.refresh_chat(chat_id, members)

    async def _flush_dirty(self) -> None:
        if self.watched.dirty:
            await self.watched.add()

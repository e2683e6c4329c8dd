"""The fleet's chat scanner: one replica (the ``chat_scanner`` lease) walks ``GET /me/chats`` by newest
message and writes a hint for each chat whose newest message is new to it (SPEC §9).

Every replica used to scan on its own, so Graph's load grew with the replica count; Graph's budget is
per app per tenant (list chats: 5 requests/s per user), shared by the whole fleet. Now the scan is
done once per fleet and the readers follow the hints.

Ordered scan: pages come newest first, so a scan reads only until the previews are older than the
previous scan's newest (less an overlap for previews that land late), usually one page. Right after
taking the role, it looks back ``TAKEOVER_LOOKBACK`` from the newest preview so messages of the gap
between the former holder's last scan and now are hinted too (a hint for a message a reader already
claimed costs one blob read). Both bounds are on Graph's clock, never the replica's.

Cadence: every ``interval_s`` (3 s) on a quiet tenant, every ``active_interval_s`` (1 s) for
``ACTIVE_FOR_S`` after a scan found a new message, every ``relaxed_interval_s`` while change
notifications arrive. An idle fleet's scan then costs 0.33 req/s, leaving room in the 0.5 req/s idle
budget for discovery and the sweep; the first message after a quiet spell waits 1.5 s for the scan on
average, the replies that follow it 0.5 s.

Unordered tenants (Graph answered the ordering with 400): the scan walks every page at a pace of
``UNORDERED_PAGES_PER_S``, resuming at the page it stopped at, and hints every chat whose preview is
newer than what this holder saw; the ordering is tried again every ``ORDERING_RETRY``.

A hint is only a reason to look: readers compare it with the chat cursor and read the chat from
Graph before claiming anything. So this module can never cause a duplicate; what it can cause is
delay, which the safety sweep bounds.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from opentelemetry import trace

from service.clock import Clock, utc_now
from service.graph.client import GraphClient
from service.graph.errors import GraphError
from service.graph.models import Chat
from service.ledger.fleet.hints import Hint, HintLog
from service.ledger.fleet.leases import Lease
from service.ledger.memory.watched_chats import WatchedChats
from service.telemetry.metrics import ChangeMetrics
from service.workers.first_watch import FirstWatch
from service.workers.hint_publish import Published, publish_hints

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)

ROLE = "chat_scanner"
# Short: while no replica scans, every chat message waits for the sweep, and a scanner that acts for
# a moment beside its successor only writes hints twice (readers compare them with the cursors).
LEASE_TTL = timedelta(seconds=10)
LEASE_MARGIN = timedelta(seconds=3)
# Graph sets a preview's time when the message is created; a preview may become visible a little
# later than a newer one of another chat. Re-reading this much before the last scan's newest costs
# nothing (the page is read anyway) and keeps such a chat from falling between two scans.
SCAN_OVERLAP = timedelta(seconds=10)
TAKEOVER_LOOKBACK = timedelta(minutes=5)
MAX_ORDERED_PAGES = (
    20  # a burst of more than 1,000 changed chats between two scans: the sweep has the rest
)
# One unordered page per second leaves 4 of the 5 list-chats requests a second per user to discovery,
# the sweep and the tools.
UNORDERED_PAGES_PER_S = 1.0
ORDERING_RETRY = timedelta(hours=1)
# With no notification for this long the scan tightens again, and the first message after a quiet
# spell is found by the scan.
NOTIFICATIONS_QUIET_S = 60.0
# After a scan found a new message the tenant counts as active this long: replies in a conversation
# come within seconds, and each is found by an active-interval scan. A quiet tenant is scanned at the
# (longer) quiet interval, which keeps an idle fleet's Graph load inside its budget (SPEC §9: at most
# 0.5 req/s at 10,000 chats, discovery and the sweep included).
ACTIVE_FOR_S = 30.0


def newest_of(chat: Chat) -> datetime | None:
    preview = chat.last_message_preview
    return preview.created_date_time if preview is not None else None


@dataclass
class ScanResult:
    """What one scan found: the hints to write, the chats no replica watches yet, and whether the walk
    reached its stopping point (only then does the scan's newest become the next scan's bound)."""

    hints: list[Hint] = field(default_factory=list)
    unwatched: list[Chat] = field(default_factory=list)
    newest: datetime | None = None
    complete: bool = False
    pages: int = 0


@dataclass
class ScanCadence:
    """When the next scan is due (the module's "Cadence")."""

    interval_s: float = (
        3.0  # a quiet tenant (no new message for ACTIVE_FOR_S); the unordered walk's batch
    )
    active_interval_s: float = 1.0  # while scans find new messages
    relaxed_interval_s: float = 30.0
    next_scan: float = float("-inf")
    heard_at: float = float("-inf")  # monotonic: the last notification hint this replica took
    active_until: float = float("-inf")  # monotonic: a scan found a new message ACTIVE_FOR_S before


@dataclass
class ScanTenure:
    """What this replica saw while holding the role: a new tenure starts afresh, since what a former
    one saw may be stale."""

    epoch: int | None = None  # the lease's, for the tenure this is
    bound: datetime | None = None  # the previous scan's newest preview (ordered mode)
    seen: dict[str, datetime] = field(default_factory=dict)  # newest preview hinted, per chat
    resume: str | None = None  # unordered mode: where the walk stopped
    walked_once: bool = False  # unordered mode: a whole walk done in this tenure


@dataclass
class ChatScanner:
    graph: GraphClient
    lease: Lease
    hints: HintLog
    watched: WatchedChats
    first_watch: FirstWatch  # starts the cursor of a chat the scan finds unwatched
    cadence: ScanCadence = field(default_factory=ScanCadence)
    # True while the fleet keeps a live chat subscription; the scan relaxes only while, besides,
    # notification hints have been arriving (``heard_notification``): a subscription whose
    # notifications go nowhere (a dead receiver, a lost route) must not slow the scan down.
    notifications_flowing: Callable[[], Awaitable[bool]] | None = None
    clock: Clock = utc_now
    monotonic: Callable[[], float] = time.monotonic
    metrics: ChangeMetrics = field(kw_only=True)
    # Delegated mode: /me/chats is the signed-in person's, most of them none of the agent's business;
    # only watched chats are hinted, and none is added to the list.
    watched_only: bool = False
    _tenure: ScanTenure = field(default_factory=ScanTenure)
    _ordered: bool = True
    _ordering_retry_at: float = float("-inf")

    async def cycle(self) -> None:
        """Renew the lease when due and scan when due; cheap to call more often than either."""
        now = self.monotonic()
        if not await self.lease.keep():
            self._forget()
            return
        if self._tenure.epoch != self.lease.epoch:
            self._tenure = ScanTenure(self.lease.epoch)  # what a former tenure saw may be stale
        cadence = self.cadence
        if now < cadence.next_scan:
            return
        relaxed = (
            now - cadence.heard_at < NOTIFICATIONS_QUIET_S
            and self.notifications_flowing is not None
            and await self.notifications_flowing()
        )
        cadence.next_scan = now + (cadence.relaxed_interval_s if relaxed else cadence.interval_s)
        if not self._ordered and now >= self._ordering_retry_at:
            self._ordered, self._tenure.resume = True, None
        with tracer.start_as_current_span(
            "chat_scan.scan", attributes={"entrabot.ordered": self._ordered}
        ):
            pages = await self.scan()  # its hints carry this trace to the replicas that read them
        if not relaxed and self._ordered and self.monotonic() < cadence.active_until:
            # Active: soon again, but at most one page per active interval, so a burst that spreads
            # over several pages does not multiply the scanner's share of list chats' 5 req/s per user.
            wait = min(cadence.interval_s, max(1, pages) * cadence.active_interval_s)
            cadence.next_scan = min(cadence.next_scan, now + wait)

    def heard_notification(self) -> None:
        """A notification hint arrived (the chat poll of this replica took it)."""
        self.cadence.heard_at = self.monotonic()

    def _forget(self) -> None:
        self._tenure = ScanTenure()

    async def scan(self) -> int:
        """One scan; returns the pages it read. A failure waits for the next scan (no fallback that
        would add load to a struggling Graph)."""
        try:
            result = await (self._scan_ordered() if self._ordered else self._scan_unordered())
        except GraphError as exc:
            if self._ordered and exc.status == 400:
                self._ordered, self._tenure.resume = False, None
                self._ordering_retry_at = self.monotonic() + ORDERING_RETRY.total_seconds()
                log.warning(
                    "Graph refused the chats ordering; scanning unordered at a paced rate",
                    extra={"status": exc.status},
                )
                self._count("ordering_refused")
                return 1
            log.warning(
                "chat scan failed; the next scan tries again",
                extra={"error": type(exc).__name__, "status": exc.status},
            )
            self._count("failed")
            self.cadence.active_until = float(
                "-inf"
            )  # a struggling Graph: back to the quiet interval
            return 1
        if not await self._publish(result):
            return result.pages
        tenure = self._tenure
        if result.complete and result.newest is not None:
            tenure.bound = (
                max(result.newest, tenure.bound) if tenure.bound is not None else result.newest
            )
        if result.hints:
            self.cadence.active_until = self.monotonic() + ACTIVE_FOR_S
        self._count("ordered" if self._ordered else "unordered")
        return result.pages

    async def _scan_ordered(self) -> ScanResult:
        # Measured on Graph's clock only (a replica's clock may be off): after the previous scan's
        # newest, or, at the start of a tenure, back from the newest preview there is.
        bound = self._tenure.bound
        stop_before = (bound - SCAN_OVERLAP) if bound is not None else None
        result = ScanResult()
        async for page in self.graph.chats.my_chats_pages(
            ordered=True, max_pages=MAX_ORDERED_PAGES
        ):
            result.pages += 1
            if stop_before is None:
                top = max((t for c in page.items if (t := newest_of(c)) is not None), default=None)
                stop_before = top - TAKEOVER_LOOKBACK if top is not None else None
            reached_end = self._take(page.items, result, since=stop_before)
            if reached_end or page.next_link is None:
                result.complete = True
                break
        return result

    async def _scan_unordered(self) -> ScanResult:
        tenure = self._tenure
        pages = max(1, math.ceil(self.cadence.interval_s * UNORDERED_PAGES_PER_S))
        # The first walk of a tenure hints only recent previews; what it saw becomes the comparison.
        since = None if tenure.walked_once else self.clock() - TAKEOVER_LOOKBACK
        result = ScanResult()
        last_link: str | None = tenure.resume
        read = 0
        async for page in self.graph.chats.my_chats_pages(
            ordered=False, max_pages=pages, start=tenure.resume
        ):
            read += 1
            result.pages = read
            self._take(page.items, result, since=since)
            last_link = page.next_link
            if last_link is None:
                break
        # The walk goes on from here next time; at the end it starts over.
        tenure.resume = last_link if read else None
        if read and last_link is None:
            tenure.walked_once = True
        result.complete = True
        return result

    def _take(self, chats: Sequence[Chat], result: ScanResult, *, since: datetime | None) -> bool:
        """Add the hints ``chats`` call for; True when the page reached previews older than ``since``,
        or chats without a preview (ordered mode: the rest are older still, or have none either —
        OData sorts null after every value in a descending order, OData v4 Part 2 §5.1.1.5.1; read,
        not run against a tenant)."""
        older = False
        known, seen_by_tenure = self.watched.chats, self._tenure.seen
        for chat in chats:
            newest = newest_of(chat)
            ignored = self.watched_only and chat.id not in known
            if chat.id not in known and not ignored:
                result.unwatched.append(chat)
            if newest is None:
                older = True
                continue  # no message yet: nothing to read until one comes, and then it has a preview
            if result.newest is None or newest > result.newest:
                result.newest = newest
            if since is not None and newest < since:
                older = True
                if not ignored:
                    seen_by_tenure.setdefault(chat.id, newest)
                continue
            if ignored:
                continue  # still counted above, so the ordered scan stops paging where it should
            seen = seen_by_tenure.get(chat.id)
            if seen is not None and newest <= seen:
                continue
            seen_by_tenure[chat.id] = newest
            preview = chat.last_message_preview
            result.hints.append(
                Hint(chat.id, newest, preview.id if preview is not None else None, "scan")
            )
        return older

    async def _publish(self, result: ScanResult) -> bool:
        published = await publish_hints(
            self.lease,
            self.watched,
            self.hints,
            source="scan",
            unwatched=result.unwatched,
            hints=result.hints,
            metrics=self.metrics,
            first_watch=self.first_watch,
        )
        if published is Published.LEASE_LOST:
            self._forget()
            return False
        if published is Published.HINTS_UNWRITTEN:
            for hint in result.hints:  # not marked seen: the next scan offers them again
                self._tenure.seen.pop(hint.chat_id, None)
            self._count("hints_unwritten")
            return False
        return True

    def _count(self, outcome: str) -> None:
        self.metrics.chat_scans.labels(outcome=outcome).inc()

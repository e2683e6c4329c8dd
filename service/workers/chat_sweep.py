"""The safety sweep: one replica (the ``chat_sweep`` lease) walks every chat's newest-message preview
at a slow pace and hints each chat whose cursor is behind it (SPEC §9).

Notifications get lost (Graph sends no ``missed`` signal for Teams), hints get lost (a write that
failed, a reader that was down for longer than the hint segments last), and a scanner can die between
reading a page and writing its hints. Each of those delays a message; the sweep bounds the delay to
one rotation (``ENTRABOT_CHAT_SWEEP_INTERVAL_S`` per page of 50 chats) so that none of them loses one.

It compares with the fleet's cursors, not with Graph's message lists: one cursor read per chat (blob
storage, not the Graph budget) and one Graph request per 50 chats. A chat with no cursor gets its
first watch here (service.workers.first_watch: its cursor starts from its preview, host or no host),
then is compared like any other; one whose cursor still cannot be started is hinted, so a reader with
a host makes its first sight. While its pages find work (messages a lost hint hid, or that wait for a
host) it goes on at one page every two seconds (40 s per thousand chats), within what list chats
allows the whole fleet (5 requests a second per user, shared with the scanner, discovery and the
tools); a quiet page is followed by the slow pace.

A message younger than ``IN_FLIGHT_S`` is hinted like any other but is not work found: under steady
traffic most pages show one the scanner's hint is still carrying to its claim (post → claim takes about
a second), and counting those kept the sweep at the fast pace for as long as people talked: ten times
its list-chats requests and cursor reads, for nothing a lost hint hid.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from opentelemetry import trace

from service.clock import Clock, utc_now
from service.graph.client import GraphClient
from service.graph.errors import GraphError
from service.graph.models import Chat
from service.ledger.claims.chat_claim_types import CursorRead
from service.ledger.claims.chat_cursor import ChatCursor
from service.ledger.claims.chat_ledger import ChatLedger
from service.ledger.fleet.hints import Hint, HintLog
from service.ledger.fleet.leases import Lease
from service.ledger.records.reads import ReadOutcome
from service.ledger.memory.watched_chats import WatchedChats
from service.storage.errors import StorageError
from service.telemetry.metrics import ChangeMetrics
from service.workers.chat_scan import newest_of
from service.workers.chat_state import OfferedMessage
from service.workers.first_watch import FirstWatch
from service.workers.hint_publish import Published, publish_hints

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)

ROLE = "chat_sweep"
ABSENT = ReadOutcome.ABSENT
BUSY_PAGE_S = 2.0
# A newest message this young is normally on its way from the scanner's hint to a claim. Judged on this
# replica's clock against Graph's: a skewed clock changes only the sweep's pace, never what it hints.
IN_FLIGHT_S = 30.0


@dataclass(frozen=True)
class Finding:
    """A chat the sweep hints, and whether that is work found (it quickens the sweep) or a message
    probably in flight."""

    hint: Hint
    work: bool


@dataclass
class ChatSweep:
    graph: GraphClient
    lease: Lease
    hints: HintLog
    ledger: ChatLedger[OfferedMessage]
    watched: WatchedChats
    first_watch: FirstWatch  # starts the cursor of a chat found without one
    interval_s: float = 20.0  # one page of 50 chats per interval
    clock: Clock = utc_now
    monotonic: Callable[[], float] = time.monotonic
    metrics: ChangeMetrics = field(kw_only=True)
    # Delegated mode: the person's other chats are not swept, nor added to the watched list.
    watched_only: bool = False
    _next_page: float = float("-inf")
    _resume: str | None = None
    _held_epoch: int | None = field(default=None)

    async def cycle(self) -> None:
        now = self.monotonic()
        if not await self.lease.keep():
            self._resume, self._held_epoch = None, None
            return
        if self._held_epoch != self.lease.epoch:
            self._resume, self._held_epoch = None, self.lease.epoch
        if now < self._next_page:
            return
        with tracer.start_as_current_span("chat_sweep.page"):
            found = (
                await self.sweep_page()
            )  # its hints carry this trace to the replicas that read them
        # A page that found work (a cold fleet's chats without cursors, or messages a lost hint hid)
        # is followed at the fast pace; a quiet page at the slow one.
        self._next_page = now + (min(self.interval_s, BUSY_PAGE_S) if found else self.interval_s)

    async def sweep_page(self) -> bool:
        """One page of the rotation; a failed page is swept again next time. True when it hinted."""
        try:
            pages = [
                page
                async for page in self.graph.chats.my_chats_pages(
                    ordered=False, max_pages=1, start=self._resume
                )
            ]
        except GraphError as exc:
            log.warning(
                "sweep page failed; swept again next time",
                extra={"error": type(exc).__name__, "status": exc.status},
            )
            self._count("failed")
            return False
        page = pages[0] if pages else None
        chats = list(page.items) if page is not None else []
        if self.watched_only:
            chats = [c for c in chats if c.id in self.watched]
        looks = {chat.id: await self._look(chat.id) for chat in chats}
        absent = [c for c in chats if (r := looks[c.id]) is not None and r.outcome is ABSENT]
        # Their first watch, before the hints and the list: a reader finds the cursor with the hint.
        started = await self.first_watch.start(absent) if absent else {}
        findings = [
            f
            for chat in chats
            if (f := self._behind(chat, looks[chat.id], started.get(chat.id))) is not None
        ]
        hints = [f.hint for f in findings]
        unwatched = [c for c in chats if c.id not in self.watched]
        published = await publish_hints(
            self.lease,
            self.watched,
            self.hints,
            source="sweep",
            unwatched=unwatched,
            hints=hints,
            metrics=self.metrics,
            first_watch=None,  # started above, with every watched chat found without a cursor
        )
        if published is Published.LEASE_LOST:
            return False
        if published is Published.HINTS_UNWRITTEN:
            self._count("hints_unwritten")  # the same page is swept again next time
            return True
        self._resume = page.next_link if page is not None else None
        self._count("swept")
        return any(f.work for f in findings)

    async def _look(self, chat_id: str) -> CursorRead | None:
        """The chat's cursor; None when the store failed (a reader's own cursor read decides)."""
        try:
            return await self.ledger.resolve(chat_id)
        except StorageError:
            return None

    def _behind(
        self, chat: Chat, look: CursorRead | None, started: ChatCursor | None
    ) -> Finding | None:
        """A hint when the chat's newest message may not be decided by the fleet yet, or when the chat
        has no cursor that its first watch could start."""
        hint = self._hint_for(chat, look, started)
        if hint is None:
            return None
        in_flight = hint.message_id is not None and self.clock() - hint.newest < timedelta(
            seconds=IN_FLIGHT_S
        )
        return Finding(hint, work=not in_flight)

    def _hint_for(
        self, chat: Chat, look: CursorRead | None, started: ChatCursor | None
    ) -> Hint | None:
        newest = newest_of(chat)
        preview = chat.last_message_preview
        cursor = started if look is not None and look.outcome is ABSENT else None
        if look is not None and look.outcome is ABSENT and cursor is None and newest is None:
            # No preview, and its first watch wrote no cursor: a reader decides whether it is
            # empty (its first sight), so it is hinted with no message.
            return Hint(chat.id, self.clock(), None, "sweep")
        if newest is None:
            return None  # nothing to show: an empty chat, or one with a cursor
        if look is not None and look.outcome is ReadOutcome.PRESENT:
            cursor = look.value
        hint = Hint(chat.id, newest, preview.id if preview is not None else None, "sweep")
        if cursor is None:
            return hint  # unreadable, or not started: a reader's own cursor read decides
        # Recorded is not enough: a message claimed ahead of one left for another target is recorded
        # while the fleet's watermark stays before the one left.
        if cursor.last_ts is not None and cursor.last_ts >= newest:
            return None
        return hint

    def _count(self, outcome: str) -> None:
        self.metrics.chat_sweeps.labels(outcome=outcome).inc()

"""The chat poll: hints → cursor → Graph → filter → allot → claim → hub (SPEC §5, §9).

Each cycle gives the fleet-singleton roles this replica may hold their turn (the elected scanner and
the safety sweep, service.workers.chat_scan and chat_sweep), then takes the fleet's new change hints.
A hinted chat is read from Graph only while the hub holds a target that could take a chat message
(the delivery rule), and only when the fleet's cursor does not already cover the hint: the replica
that claimed spares the others the read, so Graph's load does not grow with the replica count.
Replicas taking the same hint reach the chat a fixed, per-replica moment apart for that reason.

It claims only what its targets can take: messages only a sponsor wait would take are allotted once
per cycle over every chat (a wait takes one). Each chat is handled on its own: one chat's 403, 404,
5xx or unreadable cursor never delays the others' pushes, and every ambiguity claims nothing and
keeps the want for a later cycle (service.workers.chat_wants says when a want is satisfied).

What is new is judged by createdDateTime. Graph lists by lastModifiedDateTime, which an edit, a soft
delete or a reaction moves on an old message; such a message is never taken for new, at first sight
or later.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TypeVar

from opentelemetry import trace

from service.delivery.filters import filter_human_messages
from service.delivery.hub import DeliveryHub
from service.delivery.message import InboundMessage, Source
from service.delivery.permission_verdict import parse_verdict
from service.delivery.sponsors import SponsorGate
from service.graph.client import GraphClient
from service.graph.errors import GraphError
from service.graph.models import ChatMessage
from service.ledger import Candidate, ChatLedger, ReadOutcome, WatchedChats
from service.ledger.cas import UpdateOutcome
from service.clock import Clock, later, utc_now
from service.ledger.chat_claims import CursorRead
from service.ledger.hints import Hint, HintReader
from service.ledger.readers import ReaderRoster
from service.ledger.permission_requests import PermissionRequests, Standing
from service.storage.errors import StorageError
from service.telemetry.metrics import Metrics
from service.telemetry.tracing import context_from_traceparent
from service.domain.agent import AgentUser
from service.domain.inbound import chat_inbound
from service.domain.message_order import oldest_first
from service.workers.chat_state import (
    ChatPhase,
    ChatPollState,
    ChatRead,
    OfferedMessage,
    ReadMiss,
    decide_offer,
    first_sight_surfaces,
)
from service.workers.chat_wants import (
    BEHIND_RETRY_S,
    FAILED_RETRY_S,
    RETRY_S,
    UNRESOLVED_RETRY_S,
    WATCHED_RELOAD_S,
    Behind,
    FleetRole,
    WantedRead,
)
from service.workers.read_pacer import ReadPacer
from service.workers.recorder import DeliveryRecorder

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)

# A chat with more new messages than this since the last cycle surfaces only its newest ones.
MAX_PAGES_PER_CHAT = 20
# New watched chats beyond this many are checked for a cursor with one listing, not a read each.
LIST_CURSORS_ABOVE = 20

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class ChatPoller:
    graph: GraphClient
    ledger: ChatLedger[OfferedMessage]
    watched: WatchedChats
    hub: DeliveryHub
    agent: AgentUser
    recorder: DeliveryRecorder
    hints: HintReader  # the fleet's change hints: the only reason a chat is read (besides our own doubts)
    gate: SponsorGate | None = None
    metrics: Metrics | None = None
    clock: Clock = utc_now
    concurrency: int = 8
    first_sight_max_age: timedelta = timedelta(hours=24)
    sent_message_ids: Collection[str] = frozenset()
    permissions: PermissionRequests | None = None  # pending permission requests of the fleet
    # The fleet roles whose turn comes with this loop: the scanner and the sweep (SPEC §9).
    roles: Sequence[FleetRole] = ()
    readers: ReaderRoster | None = None  # the fleet's chat readers: whose turn a hinted chat is
    on_notification_hint: Callable[[], None] | None = None  # tells the scanner notifications arrive
    pacer: ReadPacer = field(init=False)
    # Settings.chat_read_spread_s and chat_read_gap_s, given by the wiring (no second default here).
    read_spread_s: float = field(kw_only=True)  # the gap between two replicas' turns
    min_read_gap_s: float = field(kw_only=True)  # between two reads of one chat by this replica
    monotonic: Callable[[], float] = time.monotonic
    _states: dict[str, ChatPollState] = field(default_factory=dict)
    _wanted: dict[str, WantedRead] = field(default_factory=dict)
    _behind: dict[str, Behind] = field(default_factory=dict)
    _read_at: dict[str, float] = field(default_factory=dict)  # monotonic: this replica's last read of each chat
    _watched_reload_at: float = float("-inf")
    _first_sights_taken_at: int = -1  # the watched list's length when its new chats last became wants

    def __post_init__(self) -> None:
        self.pacer = ReadPacer(lambda: len(self.readers.readers) if self.readers is not None else 1,
                               monotonic=self.monotonic)

    def state_of(self, chat_id: str) -> ChatPollState:
        state = self._states.get(chat_id)
        if state is None:
            state = self._states[chat_id] = ChatPollState(chat_id)
        return state

    async def register_created_chat(self, chat_id: str) -> None:
        """A chat the agent just created: its newest message surfaces whatever its age, on whichever
        replica first polls it with a target, so the rule is recorded in the shared cursor.

        If it cannot be recorded (Graph or the store failing, or in doubt), only this replica knows
        it, as its own first sight's exception; other replicas then apply the 24-hour rule, which can
        only surface less, never replay.
        """
        state = self.state_of(chat_id)
        state.surface_newest_regardless_of_age = True
        try:
            newest = await self.graph.get_newest_chat_message(chat_id)
            update = await self.ledger.start_created_chat(
                chat_id, Candidate(newest.id, newest.created_date_time) if newest is not None else None)
            problem = None if update.holds else update.outcome.value
        except (GraphError, StorageError) as exc:
            problem = type(exc).__name__
        if problem is not None:
            log.warning("created chat not recorded for the fleet; only this replica surfaces its newest message",
                        extra={"chat_id": chat_id, "problem": problem})
            # Read it here without waiting for a hint: the scan may never hint an old newest message.
            now = self.monotonic()
            self._wanted[chat_id] = WantedRead(None, None, False, now).merged(self._wanted.get(chat_id))
            return
        if state.phase is ChatPhase.NOT_BOOTSTRAPPED:
            state.phase = ChatPhase.NEEDS_RESOLUTION  # the cursor exists now: read it, never bootstrap over it

    async def cycle(self) -> None:
        """Give the fleet roles this replica may hold their turn, take the new hints, and read and
        claim the chats they name that this replica's targets could take something from.

        A chat whose messages only a sponsor wait would take is claimed after every chat has been
        read, in one decision over all of them: a wait takes one message, so with sponsor messages
        in two chats it must be offered only the older one; deciding chat by chat would claim both
        and record the second as delivered to nobody. Every other chat is claimed as soon as it is
        read, so a slow chat delays no push host's messages.
        """
        for role in self.roles:
            await role.cycle()  # the scanner and the sweep: each acts only while it holds its lease
        if self.readers is not None:
            await self.readers.refresh(self.hub.can_take(Source.CHAT), self.monotonic())
        await self._take_hints()
        await self._want_first_sights()
        try:
            await self._read_wanted()
        finally:
            if self.metrics is not None:
                self.metrics.chat_first_sights_pending.set(sum(w.first_sight_only for w in self._wanted.values()))

    async def _read_wanted(self) -> None:
        if not self.hub.can_take(Source.CHAT):
            return  # the hints stay wanted until a target comes
        if self.readers is not None and self.read_spread_s > 0 and not self.readers.settled(self.monotonic()):
            return  # just started reading: wait until this replica knows the others' turns
        if self.watched.needs_load:
            outcome = await self.watched.load()
            if outcome is ReadOutcome.UNRESOLVED:
                log.warning("watched chats unreadable; polling none this cycle")
                return
            await self._want_first_sights()
        self._want_unsettled_and_behind()
        await self._read_due()

    async def _read_due(self) -> None:
        now = self.monotonic()
        due = sorted(c for c, w in self._wanted.items() if w.not_before <= now and c in self.watched)
        if not due:
            return
        with tracer.start_as_current_span("chat_poll.cycle") as span:
            span.set_attribute("entrabot.chats", len(due))
            deferred = [r for r in await self._each(due, self._poll_wanted_traced) if r is not None]
            if deferred:
                takeable = await self._takeable(m for read in deferred for m in read.inbound)
                await self._each(deferred, lambda read: self._claim_deferred(read, takeable))

    async def _poll_wanted_traced(self, chat_id: str) -> ChatRead | None:
        with self._chat_span("chat_poll.chat", chat_id):
            return await self._poll_wanted(chat_id)

    async def _claim_deferred(self, read: ChatRead, takeable: frozenset[str]) -> None:
        with self._chat_span("chat_poll.claim_allotted", read.state.chat_id):
            await self._claim_chat(read, takeable)

    @contextmanager
    def _chat_span(self, name: str, chat_id: str) -> Iterator[None]:
        """One chat's work as a child of the hint that asked for it, whichever replica wrote it, and
        linked to this cycle's span. A child rather than a link: the trace then shows the change found,
        the hint, the cursor and Graph reads, the claim and the push as one (where a message's time
        went); a cycle serves many chats, so it is the link. Without a hint's trace (our own doubt,
        tracing off at the writer) the cycle stays the parent."""
        wanted = self._wanted.get(chat_id)
        parent = context_from_traceparent(wanted.traceparent if wanted is not None else None)
        cycle = trace.get_current_span().get_span_context()
        links = [trace.Link(cycle)] if parent is not None and cycle.is_valid else []
        with tracer.start_as_current_span(name, context=parent, links=links,
                                          attributes={"entrabot.chat_id": chat_id}):
            yield

    # --- what to read: hints (SPEC §9), and the chats this replica must look at again itself ---

    async def _take_hints(self) -> None:
        """Hints written since the last cycle become wanted reads. Taken even without a target, so a
        target that comes later still finds them; an unreadable hint segment costs only latency."""
        hints = await self.hints.poll()
        if not hints:
            return
        learned = self.monotonic()
        if self.on_notification_hint is not None and any(h.source == "notification" for h in hints):
            self.on_notification_hint()
        unwatched = {h.chat_id for h in hints if h.chat_id not in self.watched}
        if unwatched and learned >= self._watched_reload_at:
            # The scanner adds a chat to the shared list before hinting it.
            self._watched_reload_at = learned + WATCHED_RELOAD_S
            await self.watched.load()
        for hint in hints:
            if hint.chat_id not in self.watched:
                self._count_hint("not_watched")
                continue
            self._wanted[hint.chat_id] = WantedRead.from_hint(hint, learned).merged(self._wanted.get(hint.chat_id))

    async def _want_first_sights(self) -> None:
        """Every watched chat this replica has not looked at yet and no replica has made the first
        sight of: its cursor is read (storage only), and a chat without one gets its first sight now
        rather than when the sweep comes by — the messages a cold chat receives before its first
        sight would surface only the newest. The replica whose turn it is reads; the others find the
        cursor it wrote. Many new chats at once (a replica starting in a fleet that knows them) are
        checked with one listing of the cursors rather than a read each; a chat whose cursor exists
        is read when a hint names it."""
        if len(self.watched) == self._first_sights_taken_at:
            return  # the list only grows: nothing new since (spares a set difference over 10,000 chats a cycle)
        self._first_sights_taken_at = len(self.watched)
        new = self.watched.chats - self._states.keys()
        seen_by_the_fleet: frozenset[str] = frozenset()
        if len(new) > LIST_CURSORS_ABOVE:
            try:
                seen_by_the_fleet = await self.ledger.chats_with_cursors()
            except StorageError as exc:
                log.warning("chat cursors not listed; reading each new chat's cursor",
                            extra={"chats": len(new), "error": type(exc).__name__})
        now = self.monotonic()
        for chat_id in new:
            self.state_of(chat_id)
            if chat_id in seen_by_the_fleet:
                continue
            wanted = WantedRead(None, None, False, now, first_sight_only=True)
            self._wanted[chat_id] = wanted.merged(self._wanted.get(chat_id))

    def _want_unsettled_and_behind(self) -> None:
        """Chats this replica must read again without a hint: a claim of its own still in doubt (its
        write unsettled, kept with its messages by the ledger), and a read that left a message for a target it did not have, once its targets
        changed or a while later."""
        now = self.monotonic()
        for chat_id in self.ledger.unsettled_chats:
            if chat_id not in self._wanted:
                self._wanted[chat_id] = WantedRead(None, None, False, now, now + RETRY_S)
        generation = self.hub.generation
        for chat_id, behind in list(self._behind.items()):
            if behind.generation != generation or now >= behind.since + BEHIND_RETRY_S:
                del self._behind[chat_id]
                wanted = WantedRead(behind.newest, None, False, now)
                self._wanted[chat_id] = wanted.merged(self._wanted.get(chat_id))

    async def _poll_wanted(self, chat_id: str) -> ChatRead | None:
        """The cursor first (storage only): the chat is read from Graph only when the fleet's cursor
        does not cover what the hint saw, so the replica that claimed spares the others the read.

        A replica later in turn for the chat only postpones the want (``turn_waits``), so the wait
        holds up none of its other chats: a cycle that slept through a later turn delayed every hint
        taken meanwhile, the first turns included (the 3-replica latency tail of the benchmark)."""
        state, wanted = self.state_of(chat_id), self._wanted[chat_id]
        own_doubt = self._in_doubt(state)
        if not own_doubt and wanted.covered_by_state(state):
            self._settle_wanted(chat_id, wanted)
            self._count_hint("covered")
            return None
        # Our own claim in doubt is ours to settle: no other replica reads the chat for it.
        turn = 0 if own_doubt else self._turn(chat_id, wanted)
        if turn and wanted.turn_waits == 0:
            wanted.turn_waits = 1
            wanted.not_before = max(wanted.not_before, self.monotonic() + turn * self.read_spread_s)
            return None
        covered = await self._cursor_covers(state, wanted)
        if covered is None:
            return None
        if not covered and turn and wanted.turn_waits == 1:
            # The replica before us may still be reading (its own pacing, a slow Graph answer): one
            # more gap and one more cursor read before a read that would meet Graph's one read a
            # second per chat.
            wanted.turn_waits = 2
            wanted.not_before = self.monotonic() + self.read_spread_s
            return None
        if covered:
            self._settle_wanted(chat_id, wanted)
            self._count_hint("covered")
            return None
        gap_ends = self._read_at.get(chat_id, float("-inf")) + self.min_read_gap_s
        if self.monotonic() < gap_ends:
            # Read a moment ago (a new hint came right after): Graph allows one read a second per chat.
            wanted.not_before = gap_ends
            return None
        await self.pacer.wait()
        started = self._read_at[chat_id] = self.monotonic()
        self._count_hint("read")
        wanted.not_before = started + self.min_read_gap_s
        read = await self._read_chat(chat_id, preview=wanted.preview_hint(chat_id))
        if read is ReadMiss.FAILED:
            wanted.not_before = self.monotonic() + FAILED_RETRY_S
            return None
        if read is ReadMiss.DECIDED:
            self._settle_wanted(chat_id, wanted, started)
            return None
        read = replace(read, started=started)
        if self.hub.needs_allotment(read.inbound):
            return read
        await self._claim_chat(read, await self._takeable(read.inbound))
        return None

    async def _cursor_covers(self, state: ChatPollState, wanted: WantedRead) -> bool | None:
        """Whether the fleet's cursor covers the want (adopting it); None when it could not be read."""
        try:
            cursor = await self.ledger.resolve(state.chat_id)
        except StorageError as exc:
            _log_chat_failure(state.chat_id, exc)
            cursor = None
        if cursor is None or cursor.outcome is ReadOutcome.UNRESOLVED:
            wanted.not_before = self.monotonic() + UNRESOLVED_RETRY_S
            return None
        self._adopt(state, cursor)
        return (cursor.value is not None and not self._in_doubt(state)
                and wanted.covered_by_cursor(cursor.value))

    def _in_doubt(self, state: ChatPollState) -> bool:
        """A claim of this replica's own in the chat is unsettled: only its own reads settle it."""
        return state.chat_id in self.ledger.unsettled_chats

    def _adopt(self, state: ChatPollState, cursor: CursorRead) -> None:
        """Take the fleet's cursor: its watermark covers only messages whose fate is decided. Not while
        a claim of ours is in doubt here: its settlement needs the chat read from our watermark."""
        if cursor.outcome is ReadOutcome.ABSENT:
            if state.phase is not ChatPhase.STEADY:
                state.phase = ChatPhase.NOT_BOOTSTRAPPED
            return
        if cursor.value is None:
            return
        if state.phase is not ChatPhase.STEADY:
            state.phase, state.watermark = ChatPhase.STEADY, cursor.value.last_ts
        elif not self._in_doubt(state):
            state.watermark = later(state.watermark, cursor.value.last_ts)

    def _settle_wanted(self, chat_id: str, wanted: WantedRead, started: float | None = None) -> None:
        """The read satisfied the want unless a newer hint came after the read started."""
        current = self._wanted.get(chat_id)
        if current is None:
            return
        if current is wanted and (started is None or current.learned_at <= started):
            del self._wanted[chat_id]

    def _count_hint(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.chat_hints.labels(outcome=outcome).inc()

    def _turn(self, chat_id: str, wanted: WantedRead) -> int:
        """This replica's turn among the fleet's readers for the chat and when the hinted message was
        written (0: read at once)."""
        if self.readers is None or self.read_spread_s <= 0:
            return 0
        return self.readers.turn(chat_id, wanted.newest)

    async def _each(self, items: Sequence[T], work: Callable[[T], Awaitable[R]]) -> list[R]:
        """``work`` over every item, at most ``concurrency`` at a time; results in the items' order."""
        limit = asyncio.Semaphore(max(1, self.concurrency))

        async def one(item: T) -> R:
            async with limit:
                return await work(item)

        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(one(item)) for item in items]
        return [task.result() for task in tasks]

    async def _takeable(self, messages: Iterable[InboundMessage]) -> frozenset[str]:
        offered = await self._without_verdicts_held_elsewhere(list(messages))
        return frozenset(m.message_id for m in self.hub.claimable(offered))

    async def _read_chat(self, chat_id: str, *, preview: Hint | None = None) -> ChatRead | ReadMiss:
        """What the chat offers for a claim this cycle, or why it offers nothing; after a failure
        nothing was claimed and nothing is lost, and the want is kept."""
        state = self.state_of(chat_id)
        try:
            if state.phase is ChatPhase.NEEDS_RESOLUTION:
                await self._resolve(state)
            if state.phase is ChatPhase.NOT_BOOTSTRAPPED:
                return await self._first_sight(state, preview)
            if state.phase is ChatPhase.STEADY:
                return await self._steady(state)
            return ReadMiss.FAILED  # cursor unresolved: nothing decided
        except (GraphError, StorageError) as exc:
            _log_chat_failure(chat_id, exc)  # fail closed for this chat only
            return ReadMiss.FAILED

    async def _claim_chat(self, read: ChatRead, takeable: frozenset[str]) -> None:
        chat_id = read.state.chat_id
        try:
            if read.first_sight:
                left = await self._claim_first_sight(read, takeable)
            else:
                left = await self._claim_steady(read, takeable)
        except (GraphError, StorageError) as exc:
            _log_chat_failure(chat_id, exc)
            wanted = self._wanted.get(chat_id)
            if wanted is not None:
                wanted.not_before = self.monotonic() + FAILED_RETRY_S
            return
        wanted = self._wanted.get(chat_id)
        if wanted is not None and read.started is not None:
            self._settle_wanted(chat_id, wanted, read.started)
        if left is not None:
            # A message here no target of ours could take: another replica's may, or a sponsor wait
            # that starts later. Looked at again when our targets change, or a while later.
            self._behind[chat_id] = Behind(self.hub.generation, self.monotonic(), left)
        else:
            self._behind.pop(chat_id, None)

    # --- phases ---

    async def _resolve(self, state: ChatPollState) -> None:
        read = await self.ledger.resolve(state.chat_id)
        if read.outcome is ReadOutcome.PRESENT:
            assert read.value is not None
            state.watermark = read.value.last_ts
            state.phase = ChatPhase.STEADY
        elif read.outcome is ReadOutcome.ABSENT:
            state.phase = ChatPhase.NOT_BOOTSTRAPPED
        # UNRESOLVED: stay, and read again later; never taken for a new chat.

    async def _first_sight(self, state: ChatPollState, preview: Hint | None) -> ChatRead | ReadMiss:
        if (preview is not None and preview.message_id is not None
                and not state.surface_newest_regardless_of_age
                and self.clock() - preview.newest >= self.first_sight_max_age):
            # The scan's preview says the newest message is too old to surface whoever wrote it: the
            # cursor starts at it, and the chat costs no message read.
            await self.ledger.bootstrap(state.chat_id, [Candidate(preview.message_id, preview.newest)])
            state.phase = ChatPhase.NEEDS_RESOLUTION
            return ReadMiss.DECIDED
        # The newest by creation: an edit, delete or reaction moves an old message's lastModifiedDateTime,
        # and taking that one for the newest would baseline days back and replay everything since.
        newest = await self.graph.get_newest_chat_message(state.chat_id)
        if newest is None:
            # An empty chat: its cursor starts with no watermark, so its first message is new.
            await self._bootstrap(state, [])
            return ReadMiss.DECIDED
        humans = self._humans([newest])
        surfaces = bool(humans) and first_sight_surfaces(
            newest, now=self.clock(), max_age=self.first_sight_max_age,
            regardless_of_age=state.surface_newest_regardless_of_age,
        )
        if not surfaces:
            await self._bootstrap(state, [newest])
            return ReadMiss.DECIDED
        offered = OfferedMessage(newest, chat_inbound(newest, state.chat_id, self.gate))
        return ChatRead(state, (offered,), first_sight=True)

    async def _claim_first_sight(self, read: ChatRead, takeable: frozenset[str]) -> datetime | None:
        """Claim the newest message; its creation time when no target here could take it."""
        state, (newest,) = read.state, read.messages
        if newest.id not in takeable:
            return newest.created  # a replica holding a target that can take it will surface it
        # Only into a chat that still has no cursor: a replica that wrote one meanwhile may have left
        # messages between its watermark and this one unclaimed, for its own host.
        claim = await self.ledger.claim(state.chat_id, [newest], newest.created, new_chat=True)
        await self._deliver(claim.won)
        if claim.may_advance:
            state.phase = ChatPhase.NEEDS_RESOLUTION  # adopt whatever the fleet's cursor now says
        return None

    async def _bootstrap(self, state: ChatPollState, seen: list[ChatMessage]) -> bool:
        update = await self.ledger.bootstrap(state.chat_id, [Candidate(m.id, m.created_date_time) for m in seen])
        # Whatever happened (written, a sibling's cursor already there, or in doubt), the next cycle
        # reads the fleet's cursor again rather than trusting this replica's view.
        state.phase = ChatPhase.NEEDS_RESOLUTION
        return update.outcome is UpdateOutcome.WRITTEN

    async def _steady(self, state: ChatPollState) -> ChatRead | ReadMiss:
        fetched: dict[str, ChatMessage] = {}
        complete = False
        pages = 0
        async for page in self.graph.list_chat_messages(state.chat_id, since=state.watermark,
                                                        max_pages=MAX_PAGES_PER_CHAT):
            pages += 1
            for message in page.items:
                fetched[message.id] = message
            if page.skipped:
                # An unreadable message may be a person's: decide nothing past it this cycle.
                log.warning("unreadable messages in a chat page; reading the chat again shortly",
                            extra={"chat_id": state.chat_id, "skipped": page.skipped})
                return ReadMiss.FAILED
            complete = page.next_link is None
        if not fetched:
            return ReadMiss.DECIDED
        if not complete:
            log.warning("chat backlog exceeds the page budget; surfacing its newest messages",
                        extra={"chat_id": state.chat_id, "pages": pages})
        # Listed by lastModifiedDateTime, which an edit, delete or reaction moves: what is new is
        # judged by creation time only, so an old message changed since never comes back here.
        ordered = [m for m in oldest_first(list(fetched.values()))
                   if state.watermark is None or m.created_date_time >= state.watermark]
        humans = {m.id for m in self._humans(ordered)}
        return ChatRead(state, tuple(OfferedMessage(m, chat_inbound(m, state.chat_id, self.gate) if m.id in humans
                                                    else None) for m in ordered), complete=complete)

    async def _claim_steady(self, read: ChatRead, takeable: frozenset[str]) -> datetime | None:
        """Claim what our targets can take; the newest creation time among the messages they could
        not (left for another target), or None."""
        state = read.state
        offer = decide_offer(read.messages, takeable)
        if not offer.candidates:
            if not offer.blocked:
                # Only system or own messages: nothing to claim, and nothing anyone else must deliver.
                await self._record_decided(read, offer.seen_up_to)
            return offer.left
        # If the write's outcome is unknown, the ledger keeps these messages with it and returns them
        # from the call that settles it as ours.
        claim = await self.ledger.claim(state.chat_id, offer.candidates, offer.seen_up_to,
                                        advance_watermark=not offer.blocked)
        await self._deliver(claim.won)
        if claim.may_advance:
            state.watermark = later(state.watermark, offer.seen_up_to)
        return offer.left

    async def _record_decided(self, read: ChatRead, seen_up_to: datetime | None) -> None:
        """Record messages nobody delivers (the agent's own replies, system messages) in the fleet's
        cursor, as a claim of them: its watermark and ids then cover the hints they raise, so the other
        replicas take them from the cursor instead of each reading the chat (issue 23 item 8). The same
        compare-and-swap and settling rules as any claim; only after a complete read, so the watermark
        never passes a person's message beyond the page budget that some replica must still deliver."""
        state = read.state
        if seen_up_to is None or not read.complete:
            state.watermark = later(state.watermark, seen_up_to)
            return
        claim = await self.ledger.claim(state.chat_id, read.messages, seen_up_to)
        await self._deliver(claim.won)  # what an earlier claim in doubt settled as ours; never these
        if claim.may_advance:
            state.watermark = later(state.watermark, seen_up_to)

    # --- helpers ---

    async def _without_verdicts_held_elsewhere(self, messages: list[InboundMessage]) -> list[InboundMessage]:
        """``messages`` less the sponsors' verdicts on live permission requests that only another target
        can hand back (another replica's host, or this replica's asking host while its stream is down)."""
        if self.permissions is None:
            return messages
        kept: list[InboundMessage] = []
        for message in messages:
            verdict = parse_verdict(message.body) if message.sender_is_directory_sponsor else None
            if verdict is not None:
                standing = await self.permissions.standing(verdict.request_id)
                # A verdict delivered as an ordinary message could never reach the host that asked:
                # while its request is live it waits for that host's target (here, after a stream
                # reconnect, or on the replica holding it); unknown standing waits for a later cycle.
                if standing is Standing.HELD_HERE and not self.hub.has_permission_target_for(message):
                    continue
                if standing in (Standing.HELD_ELSEWHERE, Standing.UNRESOLVED):
                    continue
            kept.append(message)
        return kept

    def _humans(self, messages: list[ChatMessage]) -> list[ChatMessage]:
        live = [m for m in messages if m.deleted_date_time is None]  # a deleted message is not delivered
        return filter_human_messages(
            live, agent_upn=self.agent.upn, agent_object_id=self.agent.object_id,
            sent_message_ids=self.sent_message_ids,
        )

    async def _deliver(self, won: Sequence[OfferedMessage]) -> None:
        """Push what the claim made ours: messages of this read, or those of an earlier claim whose
        uncertain write this claim settled as ours."""
        messages = [m.inbound for m in won if m.inbound is not None]
        if messages:
            dispatches = await self.hub.dispatch(messages)
            await self.recorder.delivered(dispatches)


def _log_chat_failure(chat_id: str, exc: GraphError | StorageError) -> None:
    if isinstance(exc, GraphError):
        log.warning("chat poll failed for one chat", extra={"chat_id": chat_id, "error": type(exc).__name__,
                                                              "status": exc.status})
    else:
        log.warning("chat ledger unavailable for one chat", extra={"chat_id": chat_id, "error": type(exc).__name__})

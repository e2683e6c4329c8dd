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

The parts, each one concept, used one way (nothing below imports the poll):
- service.workers.chat_book: the chats this replica polls, one ChatPollState each, and which are wanted;
- service.workers.chat_reading: one chat's read by phase (resolve, first sight, steady);
- service.workers.chat_claiming: one read's claim and push;
- service.workers.read_turns: this replica's turn among the fleet's readers, and its reads' pace;
- service.workers.conversation_reader: Graph's routes for this kind of conversation (the seam a
  second kind, a team channel's messages, would plug into).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TypeVar

from opentelemetry import trace

from service.delivery.hub import DeliveryHub
from service.domain.conversation import ConversationKind
from service.graph.errors import GraphError
from service.ledger.claims.chat_ledger import ChatLedger
from service.ledger.claims.chat_cursor import Candidate
from service.ledger.memory.watched_chats import WatchedChats
from service.ledger.records.reads import ReadOutcome
from service.ledger.fleet.hints import HintSource
from service.storage.errors import StorageError
from service.telemetry.metrics import ChangeMetrics
from service.telemetry.tracing import context_from_traceparent
from service.workers.chat_book import ChatBook
from service.workers.chat_claiming import ChatClaimer
from service.workers.chat_reading import ChatReader, log_chat_failure
from service.workers.chat_state import ChatPhase, ChatPollState, ChatRead, OfferedMessage, ReadMiss
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
from service.workers.read_turns import ReadTurns

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)

# New watched chats beyond this many are checked for a cursor with one listing, not a read each.
LIST_CURSORS_ABOVE = 20
# The cursor read that decided a chat needs a Graph read serves that read's claim if the claim comes
# within this long (a Graph read takes well under a second): one Blob read fewer per message. An older
# one is likelier to be stale, and a stale one costs a failed write, a re-read and, for an acknowledging
# host, the intent's rewrite; the claim then reads the cursor itself (beside its intent).
SEEN_CURSOR_MAX_AGE_S = 2.0

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class ChatPoller:
    reader: ChatReader  # one chat's read, by phase, through Graph's routes for Teams chats
    claimer: ChatClaimer  # one read's claim and push
    ledger: ChatLedger[OfferedMessage]
    watched: WatchedChats
    hub: DeliveryHub
    hints: HintSource  # this kind's change hints: the only reason a chat is read (besides our own doubts)
    turns: ReadTurns  # this replica's turn among the fleet's readers, and the pace of its reads
    metrics: ChangeMetrics
    concurrency: int = 8
    # The fleet roles whose turn comes with this loop: the scanner and the sweep (SPEC §9).
    roles: Sequence[FleetRole] = ()
    on_notification_hint: Callable[[], None] | None = None  # tells the scanner notifications arrive
    monotonic: Callable[[], float] = time.monotonic
    book: ChatBook = field(default_factory=ChatBook)
    _watched_reload_at: float = float("-inf")
    _first_sights_taken_at: int = (
        -1
    )  # the watched list's length when its new chats last became wants

    @property
    def kind(self) -> ConversationKind:
        """Which conversations these are: the ledger's kind (the reader and the watched list are of
        the same kind), saying which source its targets must take and which metrics it counts in."""
        return self.ledger.kind

    def state_of(self, chat_id: str) -> ChatPollState:
        return self.book.state_of(chat_id)

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
            newest = await self.reader.conversations.newest(chat_id)
            update = await self.ledger.start_created_chat(
                chat_id,
                Candidate(newest.id, newest.created_date_time) if newest is not None else None,
            )
            problem = None if update.holds else update.outcome.value
        except (GraphError, StorageError) as exc:
            problem = type(exc).__name__
        if problem is not None:
            log.warning(
                "created chat not recorded for the fleet; only this replica surfaces its newest message",
                extra={"chat_id": chat_id, "problem": problem},
            )
            # Read it here without waiting for a hint: the scan may never hint an old newest message.
            self.book.want(chat_id, WantedRead(None, None, False, self.monotonic()))
            return
        if state.phase is ChatPhase.NOT_BOOTSTRAPPED:
            state.phase = (
                ChatPhase.NEEDS_RESOLUTION
            )  # the cursor exists now: read it, never bootstrap over it

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
        await self.turns.refresh(self.hub.can_take(self.kind.source), self.monotonic())
        await self._take_hints()
        await self._want_first_sights()
        try:
            await self._read_wanted()
        finally:
            metrics = self.metrics.conversation(self.kind.name)
            metrics.first_sights_pending.set(self.book.first_sights_pending())
            served = self.hub.can_take(self.kind.source)
            metrics.awaiting_host.set(0 if served else self.book.hinted_wants())

    async def _read_wanted(self) -> None:
        if not self.hub.can_take(self.kind.source):
            # The hints stay wanted until a target comes; those another replica's host was given
            # meanwhile are let go, or they would count as waiting for a host (chats_awaiting_host).
            if self.book.unserved_look_due(now := self.monotonic(), BEHIND_RETRY_S):
                await self._each(self.book.due(now, self.watched), self._settle_if_covered)
            return
        if self.turns.settling(self.monotonic()):
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
        due = self.book.due(self.monotonic(), self.watched)
        if not due:
            return
        with tracer.start_as_current_span("chat_poll.cycle") as span:
            span.set_attribute("entrabot.chats", len(due))
            deferred = [r for r in await self._each(due, self._poll_wanted_traced) if r is not None]
            if deferred:
                takeable = await self.claimer.takeable(m for read in deferred for m in read.inbound)
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
        wanted = self.book.wanted(chat_id)
        parent = context_from_traceparent(wanted.traceparent if wanted is not None else None)
        cycle = trace.get_current_span().get_span_context()
        links = [trace.Link(cycle)] if parent is not None and cycle.is_valid else []
        with tracer.start_as_current_span(
            name, context=parent, links=links, attributes={"entrabot.chat_id": chat_id}
        ):
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
            self.book.want(hint.chat_id, WantedRead.from_hint(hint, learned))

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
        new = self.book.untracked(self.watched.chats)
        seen_by_the_fleet: frozenset[str] = frozenset()
        if len(new) > LIST_CURSORS_ABOVE:
            try:
                seen_by_the_fleet = await self.ledger.chats_with_cursors()
            except StorageError as exc:
                log.warning(
                    "chat cursors not listed; reading each new chat's cursor",
                    extra={"chats": len(new), "error": type(exc).__name__},
                )
        now = self.monotonic()
        for chat_id in new:
            self.state_of(chat_id)
            if chat_id not in seen_by_the_fleet:
                self.book.want(chat_id, WantedRead(None, None, False, now, first_sight_only=True))

    def _want_unsettled_and_behind(self) -> None:
        """Chats this replica must read again without a hint: a claim of its own still in doubt (its
        write unsettled, kept with its messages by the ledger), and a read that left a message for a
        target it did not have, once its targets changed or a while later."""
        now = self.monotonic()
        for chat_id in self.ledger.unsettled_chats:
            self.book.want_unless_wanted(chat_id, WantedRead(None, None, False, now, now + RETRY_S))
        self.book.reconsider_behind(self.hub.generation, now, BEHIND_RETRY_S)

    # --- one wanted chat: the cursor, the turn, the read ---

    async def _poll_wanted(self, chat_id: str) -> ChatRead | None:
        """The cursor first (storage only): the chat is read from Graph only when the fleet's cursor
        does not cover what the hint saw, so the replica that claimed spares the others the read.

        A replica later in turn for the chat only postpones the want (``turn_waits``), so the wait
        holds up none of its other chats: a cycle that slept through a later turn delayed every hint
        taken meanwhile, the first turns included (the 3-replica latency tail of the benchmark)."""
        state = self.state_of(chat_id)
        wanted = state.wanted
        assert wanted is not None  # due() lists only chats with a want
        own_doubt = self._in_doubt(state)
        # Our own claim in doubt is ours to settle: no other replica reads the chat for it.
        turn = 0 if own_doubt else self.turns.turn(chat_id, wanted.newest)
        covered_here = not own_doubt and state.covers(wanted)
        if covered_here or (turn and wanted.first_turn_only):  # a rotation's look: the first's
            self.book.settle(chat_id, wanted)
            self._count_hint("covered" if covered_here else "first_turn")
            return None
        if turn and wanted.turn_waits == 0:
            wanted.turn_waits = 1
            wanted.not_before = max(
                wanted.not_before, self.monotonic() + turn * self.turns.spread_s
            )
            return None
        covered = await self._cursor_covers(state, wanted)
        if covered is None:
            return None
        if not covered and turn and wanted.turn_waits == 1:
            # The replica before us may still be reading (its own pacing, a slow Graph answer): one
            # more gap and one more cursor read before a read that would meet Graph's one read a
            # second per chat.
            wanted.turn_waits = 2
            wanted.not_before = self.monotonic() + self.turns.spread_s
            return None
        if covered:
            self.book.settle(chat_id, wanted)
            self._count_hint("covered")
            return None
        gap_ends = state.read_at + self.turns.min_gap_s
        if self.monotonic() < gap_ends:
            # Read a moment ago (a new hint came right after): Graph allows one read a second per chat.
            wanted.not_before = gap_ends
            return None
        await self.turns.pacer.wait()
        started = state.read_at = self.monotonic()
        self._count_hint("read")
        wanted.not_before = started + self.turns.min_gap_s
        read = await self.reader.read(state, preview=wanted.preview_hint(chat_id))
        if read is ReadMiss.FAILED:
            wanted.not_before = self.monotonic() + FAILED_RETRY_S
            return None
        if read is ReadMiss.DECIDED:
            self.book.settle(chat_id, wanted, started)
            return None
        read = replace(read, started=started)
        if self.hub.needs_allotment(read.inbound):
            return read
        await self._claim_chat(read, await self.claimer.takeable(read.inbound))
        return None

    async def _cursor_covers(self, state: ChatPollState, wanted: WantedRead) -> bool | None:
        """Whether the fleet's cursor covers the want (adopting it); None when it could not be read."""
        try:
            cursor = await self.ledger.resolve(state.chat_id)
        except StorageError as exc:
            log_chat_failure(state.chat_id, exc)
            cursor = None
        if cursor is None or cursor.outcome is ReadOutcome.UNRESOLVED:
            wanted.not_before = self.monotonic() + UNRESOLVED_RETRY_S
            return None
        state.adopt(cursor, in_doubt=self._in_doubt(state))
        state.seen_cursor, state.seen_cursor_at = cursor, self.monotonic()
        return (
            cursor.value is not None
            and not self._in_doubt(state)
            and wanted.covered_by_cursor(cursor.value)
        )

    async def _settle_if_covered(self, chat_id: str) -> None:
        """The fleet's cursor (a blob read, never Graph) covers the want: nothing waits in the chat."""
        state = self.state_of(chat_id)
        wanted = state.wanted
        if wanted is not None and not self._in_doubt(state):
            if await self._cursor_covers(state, wanted):
                self.book.settle(chat_id, wanted)

    async def _claim_chat(self, read: ChatRead, takeable: frozenset[str]) -> None:
        chat_id = read.state.chat_id
        cursor = read.state.take_seen_cursor(self.monotonic(), SEEN_CURSOR_MAX_AGE_S)
        try:
            left = await self.claimer.claim(read, takeable, cursor=cursor)
        except (GraphError, StorageError) as exc:
            log_chat_failure(chat_id, exc)
            wanted = self.book.wanted(chat_id)
            if wanted is not None:
                wanted.not_before = self.monotonic() + FAILED_RETRY_S
            return
        wanted = self.book.wanted(chat_id)
        if wanted is not None and read.started is not None:
            self.book.settle(chat_id, wanted, read.started)
        if left is not None:
            # A message here no target of ours could take: another replica's may, or a sponsor wait
            # that starts later. Looked at again when our targets change, or a while later.
            self.book.leave_behind(chat_id, Behind(self.hub.generation, self.monotonic(), left))
        else:
            self.book.caught_up(chat_id)

    def _in_doubt(self, state: ChatPollState) -> bool:
        """A claim of this replica's own in the chat is unsettled: only its own reads settle it."""
        return state.chat_id in self.ledger.unsettled_chats

    def _count_hint(self, outcome: str) -> None:
        self.metrics.conversation(self.kind.name).hints.labels(outcome=outcome).inc()

    async def _each(self, items: Sequence[T], work: Callable[[T], Awaitable[R]]) -> list[R]:
        """``work`` over every item, at most ``concurrency`` at a time; results in the items' order."""
        limit = asyncio.Semaphore(max(1, self.concurrency))

        async def one(item: T) -> R:
            async with limit:
                return await work(item)

        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(one(item)) for item in items]
        return [task.result() for task in tasks]

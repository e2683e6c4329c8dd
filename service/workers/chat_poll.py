"""The chat poll: every watched chat, every few seconds, Graph → filter → allot → claim → hub.

It polls only while the hub holds a target that could take a chat message (the delivery rule), and
claims only what its targets can take: messages only a sponsor wait would take are allotted once per
cycle over every chat (a wait takes one). Each chat is handled on its own: one chat's 403, 404, 5xx
or unreadable cursor never delays the others' pushes, and every ambiguity claims nothing and keeps
the messages for a later cycle.

What is new is judged by createdDateTime. Graph lists by lastModifiedDateTime, which an edit, a soft
delete or a reaction moves on an old message; such a message is never taken for new, at first sight
or later.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TypeVar

from opentelemetry import trace

from service.delivery.filters import filter_human_messages
from service.delivery.hub import DeliveryHub
from service.delivery.message import InboundMessage, Source
from service.delivery.permission_verdict import parse_verdict
from service.delivery.sponsors import SponsorGate
from service.graph.client import GraphClient
from service.graph.errors import GraphError
from service.graph.models import ChatMessage, ChatMessagePreview
from service.ledger import Candidate, ChatClaimOutcome, ChatLedger, ReadOutcome, WatchedChats
from service.ledger.cas import UpdateOutcome
from service.clock import Clock, later, utc_now
from service.ledger.hints import HintReader
from service.ledger.permission_requests import PermissionRequests, Standing
from service.storage.errors import StorageError
from service.telemetry.metrics import Metrics
from service.domain.agent import AgentUser
from service.domain.inbound import chat_inbound
from service.domain.message_order import oldest_first
from service.workers.chat_state import ChatPhase, ChatPollState, ChatRead, decide_offer, first_sight_surfaces
from service.workers.recorder import DeliveryRecorder

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)

# A chat with more new messages than this since the last cycle surfaces only its newest ones.
MAX_PAGES_PER_CHAT = 20
MAX_SCAN_PAGES = 20  # 1,000 chats; chats beyond the scan are polled every cycle

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class ChatPoller:
    graph: GraphClient
    ledger: ChatLedger
    watched: WatchedChats
    hub: DeliveryHub
    agent: AgentUser
    recorder: DeliveryRecorder
    gate: SponsorGate | None = None
    metrics: Metrics | None = None
    clock: Clock = utc_now
    concurrency: int = 8
    first_sight_max_age: timedelta = timedelta(hours=24)
    sent_message_ids: Collection[str] = frozenset()
    # A chat the scan says is quiet is still read at least every this many cycles (5 min by default).
    guard_cycles: int = 60
    permissions: PermissionRequests | None = None  # pending permission requests of the fleet
    hints: HintReader | None = None  # change hints (Graph notifications): a hinted chat is read this cycle
    _states: dict[str, ChatPollState] = field(default_factory=dict)
    _previews: dict[str, ChatMessagePreview | None] = field(default_factory=dict)
    _cycles: int = 0

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
            return
        if state.phase is ChatPhase.NOT_BOOTSTRAPPED:
            state.phase = ChatPhase.NEEDS_RESOLUTION  # the cursor exists now: read it, never bootstrap over it

    async def cycle(self) -> None:
        """Read every chat worth reading and claim what this replica's targets can take.

        A chat whose messages only a sponsor wait would take is claimed after every chat has been
        read, in one decision over all of them: a wait takes one message, so with sponsor messages
        in two chats it must be offered only the older one; deciding chat by chat would claim both
        and record the second as delivered to nobody. Every other chat is claimed as soon as it is
        read, so a slow chat delays no push host's messages.
        """
        if not self.hub.can_take(Source.CHAT):
            return
        if self.watched.needs_load:
            outcome = await self.watched.load()
            if outcome is ReadOutcome.UNRESOLVED:
                log.warning("watched chats unreadable; polling none this cycle")
                return
        chats = sorted(self.watched.chats)
        self._cycles += 1
        with tracer.start_as_current_span("chat_poll.cycle") as span:
            previews = await self._scan()
            hinted = await self._hinted_chats()
            if previews is not None:
                # Read the fleet's cursors first (storage only), so the scan can be compared with them.
                await self._each([c for c in chats if self.state_of(c).phase is ChatPhase.NEEDS_RESOLUTION],
                                 self._resolve_one)
                chats = self._with_hinted(self._worth_polling(chats, previews), chats, hinted)
            span.set_attribute("entrabot.chats", len(chats))
            deferred = [r for r in await self._each(chats, self._poll_chat) if r is not None]
            if deferred:
                takeable = await self._takeable(m for read in deferred for m in read.inbound.values())
                await self._each(deferred, lambda read: self._claim_chat(read, takeable))

    # --- change hints (SPEC §9): a separate hook; nothing but the choice of chats to read changes ---

    async def _hinted_chats(self) -> set[str]:
        """Chats named by hints written since the last cycle. A hint only adds a read: claims, first
        sight and fail-closed stay as they are, and an unreadable hint segment costs only latency."""
        if self.hints is None:
            return set()
        hints = await self.hints.poll()
        return {h.chat_id for h in hints} if hints else set()

    def _with_hinted(self, chosen: list[str], watched: list[str], hinted: set[str]) -> list[str]:
        joined, outcomes = join_hinted(chosen, watched, hinted)
        if self.metrics is not None:
            for outcome, count in outcomes.items():
                if count:
                    self.metrics.chat_hints.labels(outcome=outcome).inc(count)
        return joined

    async def _each(self, items: Sequence[T], work: Callable[[T], Awaitable[R]]) -> list[R]:
        """``work`` over every item, at most ``concurrency`` at a time; results in the items' order."""
        limit = asyncio.Semaphore(max(1, self.concurrency))

        async def one(item: T) -> R:
            async with limit:
                return await work(item)

        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(one(item)) for item in items]
        return [task.result() for task in tasks]

    async def _scan(self) -> dict[str, ChatMessagePreview | None] | None:
        """Each chat's newest-message preview from one ``/me/chats`` walk, or None when the walk
        failed (then every chat is polled, as without the scan)."""
        try:
            sweep = await self.graph.list_my_chats(max_pages=MAX_SCAN_PAGES, members=False)
        except GraphError as exc:
            log.warning("chat change scan failed; polling every chat", extra={"error": type(exc).__name__})
            self._previews = {}  # first sight falls back to reading each chat's newest message
            return None
        self._previews = {chat.id: chat.last_message_preview for chat in sweep.chats}
        return self._previews

    async def _resolve_one(self, chat_id: str) -> None:
        try:
            await self._resolve(self.state_of(chat_id))
        except StorageError as exc:
            log.warning("chat cursor unreadable", extra={"chat_id": chat_id, "error": type(exc).__name__})

    def _worth_polling(self, chats: list[str], previews: dict[str, ChatMessagePreview | None]) -> list[str]:
        """The chats that may hold something new.

        Reading every chat every cycle costs one chat-message request per chat, against a budget of
        20 per second shared by the whole fleet; the scan costs one request per 50 chats. A chat is
        skipped only when its cursor is settled here and its newest message is not newer than this
        replica's watermark. A rotating slice of the others is read anyway, so a stale preview delays
        a message by at most ``guard_cycles`` cycles instead of hiding it.
        """
        guard = set(chats[self._cycles % self.guard_cycles::self.guard_cycles]) if self.guard_cycles > 0 else set()
        unsettled = self.ledger.unsettled_chats
        chosen: list[str] = []
        for chat_id in chats:
            state = self.state_of(chat_id)
            if (chat_id in guard or state.phase is not ChatPhase.STEADY or state.held or chat_id in unsettled
                    or chat_id not in previews):
                chosen.append(chat_id)
                continue
            preview = previews[chat_id]
            newest = preview.created_date_time if preview is not None else None
            if newest is None:
                if state.watermark is not None:
                    chosen.append(chat_id)  # a chat with history but no preview: don't trust the scan
            elif state.watermark is None or newest > state.watermark:
                chosen.append(chat_id)
        return chosen

    async def _poll_chat(self, chat_id: str) -> ChatRead | None:
        """Read the chat and claim from it at once, or return the read when its claim must wait for
        the cycle's joint decision (``DeliveryHub.needs_allotment``)."""
        read = await self._read_chat(chat_id)
        if read is None:
            return None
        if self.hub.needs_allotment(read.inbound.values()):
            return read
        await self._claim_chat(read, await self._takeable(read.inbound.values()))
        return None

    async def _takeable(self, messages: Iterable[InboundMessage]) -> frozenset[str]:
        offered = await self._without_verdicts_held_elsewhere(list(messages))
        return frozenset(m.message_id for m in self.hub.claimable(offered))

    async def _read_chat(self, chat_id: str) -> ChatRead | None:
        """What the chat offers for a claim this cycle, or None when it offers nothing (a first sight
        that only set a baseline, nothing new, or a failure: nothing was claimed, nothing is lost)."""
        state = self.state_of(chat_id)
        try:
            if state.phase is ChatPhase.NEEDS_RESOLUTION:
                await self._resolve(state)
            if state.phase is ChatPhase.NOT_BOOTSTRAPPED:
                return await self._first_sight(state)
            if state.phase is ChatPhase.STEADY:
                return await self._steady(state)
        except (GraphError, StorageError) as exc:
            _log_chat_failure(chat_id, exc)  # fail closed for this chat only
        return None

    async def _claim_chat(self, read: ChatRead, takeable: frozenset[str]) -> None:
        try:
            if read.first_sight:
                await self._claim_first_sight(read, takeable)
            else:
                await self._claim_steady(read, takeable)
        except (GraphError, StorageError) as exc:
            _log_chat_failure(read.state.chat_id, exc)

    # --- phases ---

    async def _resolve(self, state: ChatPollState) -> None:
        read = await self.ledger.resolve(state.chat_id)
        if read.outcome is ReadOutcome.PRESENT:
            assert read.value is not None
            state.watermark = read.value.last_ts
            state.phase = ChatPhase.STEADY
        elif read.outcome is ReadOutcome.ABSENT:
            state.phase = ChatPhase.NOT_BOOTSTRAPPED
        # UNRESOLVED: stay, and read again next cycle; never taken for a new chat.

    async def _first_sight(self, state: ChatPollState) -> ChatRead | None:
        preview = self._previews.get(state.chat_id)
        if (preview is not None and preview.created_date_time is not None
                and not state.surface_newest_regardless_of_age
                and self.clock() - preview.created_date_time >= self.first_sight_max_age):
            # The newest message is too old to surface whoever wrote it: the cursor starts at it,
            # and the chat costs no message read.
            await self.ledger.bootstrap(state.chat_id, [Candidate(preview.id, preview.created_date_time)])
            state.phase = ChatPhase.NEEDS_RESOLUTION
            return None
        # The newest by creation: an edit, delete or reaction moves an old message's lastModifiedDateTime,
        # and taking that one for the newest would baseline days back and replay everything since.
        newest = await self.graph.get_newest_chat_message(state.chat_id)
        if newest is None:
            # An empty chat: its cursor starts with no watermark, so its first message is new.
            await self._bootstrap(state, [])
            return None
        humans = self._humans([newest])
        surfaces = bool(humans) and first_sight_surfaces(
            newest, now=self.clock(), max_age=self.first_sight_max_age,
            regardless_of_age=state.surface_newest_regardless_of_age,
        )
        if not surfaces:
            await self._bootstrap(state, [newest])
            return None
        inbound = chat_inbound(newest, state.chat_id, self.gate)
        return ChatRead(state, (newest,), {newest.id: inbound}, {newest.id: newest}, first_sight=True)

    async def _claim_first_sight(self, read: ChatRead, takeable: frozenset[str]) -> None:
        state, (newest,) = read.state, read.ordered
        if newest.id not in takeable:
            return  # a replica holding a target that can take it will surface it
        # Only into a chat that still has no cursor: a replica that wrote one meanwhile may have left
        # messages between its watermark and this one unclaimed, for its own host.
        claim = await self.ledger.claim(state.chat_id, [Candidate(newest.id, newest.created_date_time)],
                                        newest.created_date_time, new_chat=True)
        if claim.outcome is ChatClaimOutcome.UNRESOLVED:
            state.held[newest.id] = read.inbound[newest.id]
        await self._deliver(state, claim.ids, read.fetched)
        if claim.may_advance:
            state.phase = ChatPhase.NEEDS_RESOLUTION  # adopt whatever the fleet's cursor now says

    async def _bootstrap(self, state: ChatPollState, seen: list[ChatMessage]) -> bool:
        update = await self.ledger.bootstrap(state.chat_id, [Candidate(m.id, m.created_date_time) for m in seen])
        # Whatever happened (written, a sibling's cursor already there, or in doubt), the next cycle
        # reads the fleet's cursor again rather than trusting this replica's view.
        state.phase = ChatPhase.NEEDS_RESOLUTION
        return update.outcome is UpdateOutcome.WRITTEN

    async def _steady(self, state: ChatPollState) -> ChatRead | None:
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
                log.warning("unreadable messages in a chat page; retrying the chat next cycle",
                            extra={"chat_id": state.chat_id, "skipped": page.skipped})
                return None
            complete = page.next_link is None
        if not fetched:
            return None
        if not complete:
            log.warning("chat backlog exceeds the page budget; surfacing its newest messages",
                        extra={"chat_id": state.chat_id, "pages": pages})
        # Listed by lastModifiedDateTime, which an edit, delete or reaction moves: what is new is
        # judged by creation time only, so an old message changed since never comes back here.
        ordered = tuple(m for m in oldest_first(list(fetched.values()))
                        if state.watermark is None or m.created_date_time >= state.watermark)
        inbound = {m.id: chat_inbound(m, state.chat_id, self.gate) for m in self._humans(list(ordered))}
        return ChatRead(state, ordered, inbound, fetched)

    async def _claim_steady(self, read: ChatRead, takeable: frozenset[str]) -> None:
        state, inbound = read.state, read.inbound
        offer = decide_offer(read.ordered, set(inbound), takeable)
        if not offer.candidates:
            if not offer.blocked:
                # Only system or own messages: nothing to claim, and nothing anyone else must deliver.
                state.watermark = later(state.watermark, offer.seen_up_to)
            return
        claim = await self.ledger.claim(
            state.chat_id, [Candidate(m.id, m.created_date_time) for m in offer.candidates], offer.seen_up_to,
            advance_watermark=not offer.blocked,
        )
        if claim.outcome is ChatClaimOutcome.UNRESOLVED:
            # If the uncertain write turns out ours, a later call returns these ids: keep their text.
            state.held.update({m.id: inbound[m.id] for m in offer.candidates})
        await self._deliver(state, claim.ids, read.fetched, inbound)
        if claim.may_advance:
            state.watermark = later(state.watermark, offer.seen_up_to)

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

    async def _deliver(
        self,
        state: ChatPollState,
        ids: tuple[str, ...],
        fetched: dict[str, ChatMessage],
        inbound: dict[str, InboundMessage] | None = None,
    ) -> None:
        messages: list[InboundMessage] = []
        for message_id in ids:
            known = (inbound or {}).get(message_id) or state.held.pop(message_id, None)
            if known is None and message_id in fetched:
                known = chat_inbound(fetched[message_id], state.chat_id, self.gate)
            if known is not None:
                messages.append(known)
        if state.chat_id not in self.ledger.unsettled_chats:
            state.held.clear()  # nothing in doubt any more: what was held was settled as lost
        if messages:
            dispatches = await self.hub.dispatch(messages)
            await self.recorder.delivered(messages, dispatches)


def join_hinted(chosen: list[str], watched: list[str], hinted: set[str]) -> tuple[list[str], dict[str, int]]:
    """``chosen`` plus every watched chat a hint names, in the watched order, and how each hinted chat
    counted: joined (the scan would have skipped it), already_chosen, not_watched (discovery's job)."""
    picked = set(chosen)
    watched_set = set(watched)
    outcomes = {"joined": len(hinted & watched_set - picked), "already_chosen": len(hinted & picked),
                "not_watched": len(hinted - watched_set)}
    wanted = picked | (hinted & watched_set)
    return [c for c in watched if c in wanted], outcomes


def _log_chat_failure(chat_id: str, exc: GraphError | StorageError) -> None:
    if isinstance(exc, GraphError):
        log.warning("chat poll failed for one chat", extra={"chat_id": chat_id, "error": type(exc).__name__,
                                                              "status": exc.status})
    else:
        log.warning("chat ledger unavailable for one chat", extra={"chat_id": chat_id, "error": type(exc).__name__})

"""One chat's read, by phase: resolve the fleet's cursor, make the first sight, or list what is new.

What is new is judged by createdDateTime. Graph lists by lastModifiedDateTime, which an edit, a soft
delete or a reaction moves on an old message; such a message is never taken for new, at first sight
or later. A read decides or claims nothing by itself beyond a first sight's baseline: it returns what
the chat offers (a ChatRead) or why it offers nothing (a ReadMiss), and the claim steps
(service.workers.chat_claiming) take it from there.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from service.clock import Clock
from service.domain.agent import AgentUser
from service.graph.authorship import SentView, people_messages, posted_as_agent_identity
from service.graph.message_order import oldest_first
from service.graph.errors import GraphError
from service.graph.models import ChatMessage
from service.ledger.claims.chat_ledger import ChatLedger
from service.ledger.claims.chat_cursor import Candidate
from service.ledger.records.reads import ReadOutcome
from service.ledger.fleet.hints import Hint
from service.ledger.memory.sent_messages import SentMessages
from service.storage.errors import StorageError
from service.workers.chat_state import (
    ChatPhase,
    ChatPollState,
    ChatRead,
    OfferedMessage,
    ReadMiss,
    first_sight_surfaces,
)
from service.workers.conversation_reader import ConversationReader

log = logging.getLogger(__name__)

# A chat with more new messages than this since the last cycle surfaces only its newest ones.
MAX_PAGES_PER_CHAT = 20


@dataclass(frozen=True)
class ChatReader:
    conversations: ConversationReader
    ledger: ChatLedger[OfferedMessage]
    agent: AgentUser
    clock: Clock
    first_sight_max_age: timedelta
    # Settings.chat_max_age_h: an older message is decided, never delivered (create_chat's newest aside).
    max_age: timedelta
    # The fleet's record of the agent's sent messages: read in delegated mode only, where the agent's
    # posts carry the signed-in person's identity (service.graph.authorship).
    sent: SentMessages | None = None

    def __post_init__(self) -> None:
        if self.agent.posts_as_person and self.sent is None:
            raise ValueError("a delegated-mode chat reader needs the fleet's sent-messages record")

    async def read(
        self, state: ChatPollState, *, preview: Hint | None = None
    ) -> ChatRead | ReadMiss:
        """What the chat offers for a claim this cycle, or why it offers nothing; after a failure
        nothing was claimed and nothing is lost, and the want is kept."""
        try:
            if state.phase is ChatPhase.NEEDS_RESOLUTION:
                await self.resolve(state)
            if state.phase is ChatPhase.NOT_BOOTSTRAPPED:
                return await self._first_sight(state, preview)
            if state.phase is ChatPhase.STEADY:
                return await self._steady(state)
            return ReadMiss.FAILED  # cursor unresolved: nothing decided
        except (GraphError, StorageError) as exc:
            log_chat_failure(state.chat_id, exc)  # fail closed for this chat only
            return ReadMiss.FAILED

    async def resolve(self, state: ChatPollState) -> None:
        read = await self.ledger.resolve(state.chat_id)
        if read.outcome is ReadOutcome.PRESENT:
            assert read.value is not None
            state.watermark = read.value.last_ts
            state.any_age_id = read.value.any_age_id
            state.phase = ChatPhase.STEADY
        elif read.outcome is ReadOutcome.ABSENT:
            state.phase = ChatPhase.NOT_BOOTSTRAPPED
        # UNRESOLVED: stay, and read again later; never taken for a new chat.

    async def _first_sight(self, state: ChatPollState, preview: Hint | None) -> ChatRead | ReadMiss:
        if (
            preview is not None
            and preview.message_id is not None
            and not state.surface_newest_regardless_of_age
            and self.clock() - preview.newest >= self._fresh_for
        ):
            # The scan's preview says the newest message is too old to surface whoever wrote it: the
            # cursor starts at it, and the chat costs no message read.
            await self.ledger.bootstrap(
                state.chat_id, [Candidate(preview.message_id, preview.newest)]
            )
            state.phase = ChatPhase.NEEDS_RESOLUTION
            return ReadMiss.DECIDED
        # The newest by creation: an edit, delete or reaction moves an old message's lastModifiedDateTime,
        # and taking that one for the newest would baseline days back and replay everything since.
        newest = await self.conversations.newest(state.chat_id)
        if newest is None:
            # An empty chat: its cursor starts with no watermark, so its first message is new.
            await self._bootstrap(state, [])
            return ReadMiss.DECIDED
        humans = await self._humans([newest], state.chat_id)
        if humans is None:
            return (
                ReadMiss.FAILED
            )  # a send of the agent's is in flight, or its record unreadable: later
        surfaces = (
            bool(humans)
            and self.conversations.first_sight_surfaces
            and self.conversations.delivers(newest)
        ) and first_sight_surfaces(
            newest,
            now=self.clock(),
            max_age=self._fresh_for,
            regardless_of_age=state.surface_newest_regardless_of_age,
        )
        if not surfaces:
            await self._bootstrap(state, [newest])
            return ReadMiss.DECIDED
        offered = OfferedMessage(newest, self.conversations.inbound(newest, state.chat_id))
        return ChatRead(state, (offered,), first_sight=True)

    async def _bootstrap(self, state: ChatPollState, seen: list[ChatMessage]) -> None:
        await self.ledger.bootstrap(
            state.chat_id, [Candidate(m.id, m.created_date_time) for m in seen]
        )
        # Whatever happened (written, a sibling's cursor already there, or in doubt), the next cycle
        # reads the fleet's cursor again rather than trusting this replica's view.
        state.phase = ChatPhase.NEEDS_RESOLUTION

    async def _steady(self, state: ChatPollState) -> ChatRead | ReadMiss:
        fetched: dict[str, ChatMessage] = {}
        complete = False
        pages = 0
        async for page in self.conversations.changed_since(
            state.chat_id, state.watermark, max_pages=MAX_PAGES_PER_CHAT
        ):
            pages += 1
            for message in page.items:
                fetched[message.id] = message
            if page.skipped:
                # An unreadable message may be a person's: decide nothing past it this cycle.
                log.warning(
                    "unreadable messages in a chat page; reading the chat again shortly",
                    extra={"chat_id": state.chat_id, "skipped": page.skipped},
                )
                return ReadMiss.FAILED
            complete = page.next_link is None
        if not fetched:
            return ReadMiss.DECIDED
        if not complete:
            log.warning(
                "chat backlog exceeds the page budget; surfacing its newest messages",
                extra={"chat_id": state.chat_id, "pages": pages},
            )
        # Listed by lastModifiedDateTime, which an edit, delete or reaction moves: what is new is
        # judged by creation time only, so an old message changed since never comes back here.
        ordered = [
            m
            for m in oldest_first(list(fetched.values()))
            if state.watermark is None or m.created_date_time >= state.watermark
        ]
        people = await self._humans(ordered, state.chat_id)
        if people is None:
            return ReadMiss.FAILED
        humans = {m.id for m in people if self.conversations.delivers(m)} - self._expired(
            people, state
        )
        return ChatRead(
            state,
            tuple(
                OfferedMessage(
                    m, self.conversations.inbound(m, state.chat_id) if m.id in humans else None
                )
                for m in ordered
            ),
            complete=complete,
        )

    @property
    def _fresh_for(self) -> timedelta:
        """How young a chat's newest message must be to surface on a reader's first sight."""
        return min(self.first_sight_max_age, self.max_age)

    def _expired(self, people: list[ChatMessage], state: ChatPollState) -> set[str]:
        """People's messages past the age bound: decided like the agent's own (the watermark passes
        them), never delivered, so nothing is acted on days late (they stay readable in Graph)."""
        floor = self.clock() - self.max_age
        expired = {m.id for m in people if m.created_date_time < floor and m.id != state.any_age_id}
        if expired:
            log.info(
                "chat messages older than the age bound are not delivered",
                extra={"chat_id": state.chat_id, "messages": len(expired)},
            )
        return expired

    async def _humans(self, messages: list[ChatMessage], chat_id: str) -> list[ChatMessage] | None:
        """The messages people wrote, in order; None when that cannot be decided yet (delegated mode: a
        send of the agent's in this chat is still in flight, or the record of its sends is unreadable)."""
        live = [
            m for m in messages if m.deleted_date_time is None
        ]  # a deleted message is not delivered
        sent = SentView()
        placing = posted_as_agent_identity(live, self.agent)
        if placing:
            assert self.sent is not None  # checked at construction
            sent = await self.sent.view(chat_id, placing)
        decided = people_messages(live, self.agent, sent)
        if decided.undecided:
            why = (
                "is in flight in this chat"
                if sent.readable
                else "cannot be told apart: its record is unreadable"
            )
            log.info(
                f"a send of the agent's {why}; the chat's messages are decided later",
                extra={"chat_id": chat_id},
            )
            return None
        return decided.people


def log_chat_failure(chat_id: str, exc: GraphError | StorageError) -> None:
    if isinstance(exc, GraphError):
        log.warning(
            "chat poll failed for one chat",
            extra={"chat_id": chat_id, "error": type(exc).__name__, "status": exc.status},
        )
    else:
        log.warning(
            "chat ledger unavailable for one chat",
            extra={"chat_id": chat_id, "error": type(exc).__name__},
        )

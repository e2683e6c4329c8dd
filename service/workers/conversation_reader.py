"""Reading what is new in one conversation: the seam between the poll's rules and Graph's routes.

The poll's rules (hints, turns, the shared cursor, first sight, claims) hold for any conversation whose
messages Graph lists by lastModifiedDateTime and whose newest can be asked for by creation time; what
differs between kinds of conversation (service.domain.conversation) is the route, which messages are
the agent's to hear, whether a first sight may surface the newest message, and how a message becomes
an InboundMessage. Teams chats are ChatMessagesReader; team channels are
service.workers.channel_reader; each is handed to a ChatPoller of its own, with a ledger and a watched
list of its kind, and the poll, the book and the claim steps are the same code.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from service.domain.message import InboundMessage
from service.domain.sponsors import SponsorGate
from service.graph.inbound import chat_inbound
from service.graph.client import GraphClient
from service.graph.models import ChatMessage
from service.graph.pages import Page


class ConversationReader(Protocol):
    # Whether a first sight may surface the conversation's newest message (under the age bound): a
    # chat's new-chat intro may; a channel's newest is most likely old chatter, and never replays.
    @property
    def first_sight_surfaces(self) -> bool: ...

    def delivers(self, message: ChatMessage) -> bool:
        """Whether a person's message here is the agent's to hear (every one in a chat); one that is
        not is decided like the agent's own: the watermark passes it, nothing is delivered."""
        ...

    async def newest(self, conversation_id: str) -> ChatMessage | None:
        """The most recently created message (deleted ones included), or None when there is none."""
        ...

    def changed_since(
        self, conversation_id: str, since: datetime | None, *, max_pages: int
    ) -> AsyncIterator[Page[ChatMessage]]:
        """Pages of the messages modified after ``since`` (every message when None)."""
        ...

    def inbound(self, message: ChatMessage, conversation_id: str) -> InboundMessage:
        """A person's message as the delivery layer gets it."""
        ...


@dataclass(frozen=True)
class ChatMessagesReader:
    """Teams chats: ``/chats/{id}/messages`` (the routes' Graph rules are on GraphClient's methods)."""

    graph: GraphClient
    gate: SponsorGate | None = None  # who counts as a sponsor in which chat (None: nobody)

    @property
    def first_sight_surfaces(self) -> bool:
        return True

    def delivers(self, message: ChatMessage) -> bool:
        return True

    async def newest(self, conversation_id: str) -> ChatMessage | None:
        return await self.graph.messages.get_newest_chat_message(conversation_id)

    def changed_since(
        self, conversation_id: str, since: datetime | None, *, max_pages: int
    ) -> AsyncIterator[Page[ChatMessage]]:
        return self.graph.messages.list_chat_messages(
            conversation_id, since=since, max_pages=max_pages
        )

    def inbound(self, message: ChatMessage, conversation_id: str) -> InboundMessage:
        return chat_inbound(message, conversation_id, self.gate)

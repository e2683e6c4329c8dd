"""A chat message posted once (service.delivery.send_once holds the rule): a post whose outcome Graph
left unknown is settled by reading back the chat's messages since just before the attempt for one the
agent sent with this very text (and these cards' ids), and posted again only when it provably did not
post. The cost of the look-back minute: an identical text the agent posted in that same minute counts
as this one, which errs toward never posting twice.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Generic, Literal, TypeVar

from service.clock import Clock
from service.domain.filters import html_to_text
from service.delivery.send_once import SendOnce, SendUnknown, first_in_pages
from service.graph.client import GraphClient
from service.graph.models import ChatMessage, OutboundAttachment, OutboundMention
from service.ledger.memory.sent_messages import SentMessages, SentRecordUnavailable
from service.mcp.tool_registry import ToolError

SETTLE_PAGES = 3  # the agent's message is among the newest: a busy chat's first pages hold it
SETTLE_LOOKS = 2

__all__ = ["ChatSender", "PostOutcome", "Posted", "SendUnknown"]


class PostOutcome(str, Enum):
    POSTED = "posted"  # Graph answered the POST
    FOUND_AFTER_LOST_ANSWER = (
        "found_after_lost_answer"  # Graph lost its answer; the message is in the chat
    )
    POSTED_AFTER_CHECK = (
        "posted_after_check"  # the first attempt provably did not post; posted again
    )


M = TypeVar("M", bound=ChatMessage)  # a chat message, or a channel's (service.tools.channel_send)


@dataclass(frozen=True)
class Posted(Generic[M]):
    message: M
    outcome: PostOutcome


@dataclass(frozen=True)
class Wanted:
    """What the sent message looks like when read back: its text, and the ids of the cards it carries
    (a card's body is only its placeholder, so the ids tell one card message from another)."""

    text: str
    card_ids: frozenset[str] = frozenset()

    def is_in(self, message: ChatMessage) -> bool:
        return comparable_text(
            message.body.content, message.body.content_type
        ) == self.text and self.card_ids <= {a.id for a in message.attachments if a.id}


@dataclass(frozen=True)
class ChatSender:
    graph: GraphClient
    agent_id: str  # whose messages count as ours (the agent user, or the signed-in person in delegated mode)
    clock: Clock
    # Delegated mode: Graph shows the agent's posts as the person's, so every post (a message, a card, a
    # placeholder) is noted in the fleet's record before it goes out and its id after; None otherwise.
    record: SentMessages | None = None

    async def post(
        self,
        chat_id: str,
        content: str,
        content_type: Literal["text", "html"] = "text",
        mentions: Sequence[OutboundMention] = (),
        cards: Sequence[OutboundAttachment] = (),
    ) -> Posted[ChatMessage]:
        """Post once; GraphError for a failure that posted nothing, SendUnknown when nobody can tell, and a
        ToolError when delegated mode could not note the send (then nothing was posted)."""
        if self.record is None:
            return await self._post_once(chat_id, content, content_type, mentions, cards)
        try:
            pending = await self.record.begin(chat_id)
        except SentRecordUnavailable:
            raise ToolError(
                "Nothing was posted: the fleet could not note the send in its shared store, and a post "
                "it cannot tell apart from the signed-in person's own must not go out. Try again "
                "shortly."
            ) from None
        posted_id: str | None = None
        try:
            posted = await self._post_once(chat_id, content, content_type, mentions, cards)
            posted_id = posted.message.id
            return posted
        finally:
            # Its id, recorded for the fleet, keeps the post out of every replica's poll (this replica's at
            # once). No id (not posted, or unknown): the entry goes, and the [EntraBot] prefix places a post
            # that did land.
            await self.record.settle(chat_id, pending, posted_id)

    async def _post_once(
        self,
        chat_id: str,
        content: str,
        content_type: Literal["text", "html"],
        mentions: Sequence[OutboundMention],
        cards: Sequence[OutboundAttachment],
    ) -> Posted[ChatMessage]:
        wanted = Wanted(comparable_text(content, content_type), frozenset(c.id for c in cards))

        async def look(since: datetime) -> ChatMessage | None:
            return await first_in_pages(
                self.graph.messages.list_chat_messages(
                    chat_id, since=since, max_pages=SETTLE_PAGES
                ),
                lambda m: self._is_ours(m, wanted, since),
            )

        settled = await SendOnce(self.clock, looks=SETTLE_LOOKS).send(
            lambda: self.graph.messages.send_chat_message(
                chat_id, content, content_type, mentions, cards
            ),
            look,
        )
        if settled.found is not None:
            return Posted(settled.found, PostOutcome.FOUND_AFTER_LOST_ANSWER)
        assert settled.answer is not None
        return Posted(
            settled.answer,
            PostOutcome.POSTED_AFTER_CHECK if settled.retried else PostOutcome.POSTED,
        )

    def _is_ours(self, message: ChatMessage, wanted: Wanted, since: datetime) -> bool:
        sender = message.sender.id if message.sender is not None else None
        return (
            sender == self.agent_id and message.created_date_time >= since and wanted.is_in(message)
        )


def comparable_text(text: str, content_type: str) -> str:
    """Text as Teams may hand it back: HTML reduced to text, whitespace collapsed."""
    plain = html_to_text(text) if content_type == "html" else text
    return re.sub(r"\s+", " ", plain).strip()

"""A chat message posted once: a send whose outcome Graph left unknown is settled, never blindly re-sent.

Graph has no idempotency key for chat messages, so a POST whose answer was lost (a dropped connection,
a 5xx or 504 after Graph received it) may or may not have posted. The send is settled by reading back
the chat's messages created since just before the attempt, looking for one the agent sent with this
very text. Found: it was posted. Not found in two reads a moment apart: it was not, and it is posted
again — once; a second unknown outcome is settled the same way, and only if that too stays unknown is
the caller told it MAY have been posted.

Why two reads: Graph documents no read-after-write guarantee for chat messages (read, not run here:
"List messages in a chat"); a second look after a pause catches a message that was still on its way.
The look-back starts a minute before the attempt so the fleet's and Graph's clocks may differ; the cost
is that an identical text the agent posted in that same minute counts as this one, which errs toward
never posting twice.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum
from typing import Literal

from service.clock import Clock
from service.delivery.filters import html_to_text
from service.graph.client import GraphClient
from service.graph.errors import GraphError, GraphUnavailable
from service.graph.models import ChatMessage, OutboundCard, OutboundMention

LOOK_BACK = timedelta(minutes=1)
SETTLE_PAGES = 3  # the agent's message is among the newest: a busy chat's first pages hold it
SETTLE_PAUSE_S = 2.0


class PostOutcome(str, Enum):
    POSTED = "posted"  # Graph answered the POST
    FOUND_AFTER_LOST_ANSWER = "found_after_lost_answer"  # Graph lost its answer; the message is in the chat
    POSTED_AFTER_CHECK = "posted_after_check"  # the first attempt provably did not post; posted again


@dataclass(frozen=True)
class Posted:
    message: ChatMessage
    outcome: PostOutcome


@dataclass(frozen=True)
class Wanted:
    """What the sent message looks like when read back: its text, and the ids of the cards it carries
    (a card's body is only its placeholder, so the ids tell one card message from another)."""

    text: str
    card_ids: frozenset[str] = frozenset()

    def is_in(self, message: ChatMessage) -> bool:
        return (_comparable(message.body.content, message.body.content_type) == self.text
                and self.card_ids <= {a.id for a in message.attachments if a.id})


class SendUnknown(Exception):
    """Graph failed after receiving the message, twice, and reading the chat could not tell."""


@dataclass(frozen=True)
class ChatSender:
    graph: GraphClient
    agent_id: str  # whose messages count as ours (the agent user, or the signed-in person in delegated mode)
    clock: Clock
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    pause_s: float = SETTLE_PAUSE_S

    async def post(self, chat_id: str, content: str, content_type: Literal["text", "html"] = "text",
                   mentions: Sequence[OutboundMention] = (), cards: Sequence[OutboundCard] = ()) -> Posted:
        """Post once; GraphError for a failure that posted nothing, SendUnknown when nobody can tell."""
        wanted = Wanted(_comparable(content, content_type), frozenset(c.id for c in cards))
        for attempt in range(2):
            started = self.clock()
            try:
                message = await self.graph.send_chat_message(chat_id, content, content_type, mentions, cards)
                return Posted(message, PostOutcome.POSTED if attempt == 0 else PostOutcome.POSTED_AFTER_CHECK)
            except GraphUnavailable as exc:
                if not exc.outcome_unknown:
                    raise
            found = await self._find(chat_id, wanted, started)
            if found is not None:
                return Posted(found, PostOutcome.FOUND_AFTER_LOST_ANSWER)
        raise SendUnknown(chat_id)

    async def _find(self, chat_id: str, wanted: Wanted, started: datetime) -> ChatMessage | None:
        """The agent's message with this text created since the attempt, looked for twice; None when
        both looks are complete and it is not there. A failed read cannot prove absence: SendUnknown."""
        for look in range(2):
            if look:
                await self.sleep(self.pause_s)
            try:
                found = await self._look(chat_id, wanted, started - LOOK_BACK)
            except GraphError:
                raise SendUnknown(chat_id) from None
            if found is not None:
                return found
        return None

    async def _look(self, chat_id: str, wanted: Wanted, since: datetime) -> ChatMessage | None:
        async for page in self.graph.list_chat_messages(chat_id, since=since, max_pages=SETTLE_PAGES):
            if page.skipped:
                raise SendUnknown(chat_id)  # an unreadable message may be ours
            for message in page.items:
                sender = message.sender.id if message.sender is not None else None
                if sender == self.agent_id and message.created_date_time >= since and wanted.is_in(message):
                    return message
            if page.next_link is None:
                return None
        raise SendUnknown(chat_id)  # more pages than we read: absence is not proven


def _comparable(text: str, content_type: str) -> str:
    """Text as Teams may hand it back: HTML reduced to text, whitespace collapsed."""
    plain = html_to_text(text) if content_type == "html" else text
    return re.sub(r"\s+", " ", plain).strip()

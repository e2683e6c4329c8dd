"""Whether a chat named by the model may be used: watched, or at least readable by the agent user.

Also remembers the topics of chats it has looked up or created, so ``list_watched_chats`` can show
them without a Graph call per chat.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from service.graph.client import GraphClient
from service.graph.errors import GraphBadRequest, GraphError, GraphForbidden, GraphNotFound
from service.graph.models import Chat
from service.ledger.memory.watched_chats import WatchedChats
from service.mcp.tool_registry import ToolError
from service.tools.graph_failures import graph_tool_error

MAX_REMEMBERED_TOPICS = 2_000  # bounded: the model chooses which chat ids are looked up


class ChatStanding(str, Enum):
    WATCHED = "watched"
    READABLE = "readable"  # not watched (yet), but the agent user is a member


@dataclass
class ChatAccess:
    graph: GraphClient
    watched: WatchedChats
    _topics: dict[str, str | None] = field(default_factory=dict)

    async def check(self, chat_id: str) -> ChatStanding:
        """WATCHED or READABLE; a ToolError saying where to find a usable chat id otherwise."""
        if self.watched.needs_load:
            await self.watched.load()  # UNRESOLVED keeps what is known; Graph decides below
        if chat_id in self.watched:
            return ChatStanding.WATCHED
        try:
            chat = await self.graph.chats.get_chat(chat_id)
        except (GraphNotFound, GraphForbidden, GraphBadRequest):
            raise ToolError(
                f"chat_id {chat_id!r} is not a watched chat and the agent user cannot read it. Use a chat_id "
                "from list_watched_chats or from a message you received, or create one with create_chat; "
                "there is no default chat."
            ) from None
        except GraphError as exc:
            raise graph_tool_error(exc, f"checking chat {chat_id}") from None
        self.remember(chat)
        return ChatStanding.READABLE

    def remember(self, chat: Chat) -> None:
        if chat.id not in self._topics and len(self._topics) >= MAX_REMEMBERED_TOPICS:
            self._topics.pop(next(iter(self._topics)))
        self._topics[chat.id] = chat.topic

    def topic(self, chat_id: str) -> str | None:
        return self._topics.get(chat_id)

"""A kind of conversation the fleet watches, as a value: its name, the message source it yields, and
where its shared state lives in the container (cursors, the watched list, its hints).

Teams chats are one value and a team's channels another; every part that stores or finds a
conversation's state asks its kind for the key, so a third kind is one more value here and a reader
of its own (service.workers.conversation_watch binds the Graph routes), never a copy of the poll. The
chats' keys are the single-host system's (``chat_cursors/…``, ``watched_chats``) and their hints carry
no kind, so a container written before kinds existed reads back unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, unquote

from service.domain.source import Source

_SUFFIX = ".json"


@dataclass(frozen=True, slots=True)
class ConversationKind:
    name: str  # "chat", "channel": metric labels and log fields
    source: Source  # what its messages are to the hub and the hosts
    cursor_prefix: str  # one cursor per conversation below it, in the chat cursor's format
    watched_key: str  # the shared list of its conversations
    # What its hints carry to say whose they are; None: a hint without a kind is this kind's (chats,
    # whose hints were written before kinds existed).
    hint_tag: str | None

    def cursor_key(self, conversation_id: str) -> str:
        if not conversation_id:
            raise ValueError(f"{self.name} id is empty; every cursor belongs to one {self.name}")
        return f"{self.cursor_prefix}{quote(conversation_id, safe='')}{_SUFFIX}"

    def conversation_of_cursor_key(self, key: str) -> str | None:
        """The conversation a cursor key belongs to (``cursor_key``'s inverse); None for any other key."""
        if not key.startswith(self.cursor_prefix) or not key.endswith(_SUFFIX):
            return None
        conversation_id = unquote(key[len(self.cursor_prefix) : -len(_SUFFIX)])
        return (
            conversation_id if conversation_id and self.cursor_key(conversation_id) == key else None
        )


TEAMS_CHATS = ConversationKind(
    name="chat",
    source=Source.CHAT,
    cursor_prefix="chat_cursors/",
    watched_key="watched_chats",
    hint_tag=None,
)
TEAM_CHANNELS = ConversationKind(
    name="channel",
    source=Source.CHANNEL,
    cursor_prefix="channel_cursors/",
    watched_key="watched_channels",
    hint_tag="channel",
)
KINDS: tuple[ConversationKind, ...] = (TEAMS_CHATS, TEAM_CHANNELS)


def kind_of_source(source: Source) -> ConversationKind | None:
    """The kind whose cursors record a message of ``source``; None for mail (its own cursor)."""
    return next((k for k in KINDS if k.source is source), None)

"""A chat's first watch: the fleet role that first adds a chat to the watched list (discovery, the
scanner) or finds a watched chat with no cursor (the sweep) starts the chat's shared cursor at once,
whether or not any replica has a host.

Why then: a chat's cursor used to start at a reader's first sight, and a reader reads only for a host
(the delivery rule), so what people wrote in a chat before the first host connected was history by
the time anyone looked, and only the chat's newest message surfaced. Mail's cursor starts at the
container's first boot; a chat's now starts when the fleet first watches it, so everything written
after that reaches the first host, once, through the ordinary claims (within the age bound,
``ENTRABOT_CHAT_MAX_AGE_H``, that every chat read applies).

The rule (``chat_cursor.first_watch_cursor``), the same for the chats of the container's first boot and
for a chat created or joined later: what the chat held up to its newest message at that moment is not
delivered; that newest message is, when it is younger than ``ENTRABOT_FIRST_SIGHT_MAX_AGE_H`` (a
person's fresh question, or the message that started a new chat or brought the agent in; a reader
still drops it if the agent or Graph wrote it); everything after it is. docs/delivery.md says why.

Cost (SPEC §9): the newest message is the chat's preview on the role's own ``/me/chats`` page, so a
first watch is one blob write (if_absent) and no Graph read. A chat without a preview (Graph documents
a null preview for a chat without messages) costs one read of its newest message, paced and at most
``READS_PER_CALL`` per call; one left over keeps no cursor until the sweep comes by, and a reader with
a host makes its first sight meanwhile, as before. A chat is started once: an existing cursor is never
touched (if_absent), so a first watch never moves a watermark a replica wrote, and a corrupt cursor
stays corrupt (unresolved, fail closed) for ``repair-chat``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from service.clock import Clock
from service.graph.errors import GraphError
from service.graph.models import Chat
from service.ledger.claims.chat_cursor import Candidate, ChatCursor
from service.ledger.claims.chat_ledger import ChatLedger
from service.storage.errors import StorageError
from service.workers.chat_state import OfferedMessage
from service.workers.conversation_reader import ConversationReader
from service.workers.read_pacer import ReadPacer

log = logging.getLogger(__name__)

# Reads of chats without a preview: a fifth of Graph's 20 chat-message reads a second per tenant,
# so a cold fleet's empty chats never crowd out the readers' share (read_pacer.FLEET_READS_PER_S).
READS_PER_S = 4.0
# Per call: a role's step stays short enough for its lease (the scanner's is 10 s).
READS_PER_CALL = 10
# Cursor writes in flight at once: a page of 50 new chats is one round of blob latency, not 50.
WRITES_AT_ONCE = 8


def _nowhere(chat_id: str) -> bool:
    return False


class _NoPreview(Exception):
    """The chat shows no preview and no read of its newest message is left in this call."""


@dataclass
class _Reads:
    left: int  # reads of chats without a preview this call may still make


@dataclass
class FirstWatch:
    ledger: ChatLedger[OfferedMessage]
    conversations: ConversationReader  # the newest message of a chat without a preview
    clock: Clock
    fresh_for: timedelta  # Settings.first_sight_max_age_h: a newer newest message is delivered
    # create_chat made the chat on this replica and could not record it for the fleet (ChatBook):
    # its first sight is this replica's reader's, which surfaces its newest whatever its age.
    made_here: Callable[[str], bool] = _nowhere
    pacer: ReadPacer = field(default_factory=lambda: ReadPacer(lambda: 1, reads_per_s=READS_PER_S))

    async def start(self, chats: Sequence[Chat]) -> dict[str, ChatCursor]:
        """Start the cursor of every chat in ``chats`` that has none. Returns the cursor each chat
        now has (ours, or one a replica wrote first), leaving out the chats that have none yet."""
        reads = _Reads(READS_PER_CALL)
        limit = asyncio.Semaphore(WRITES_AT_ONCE)

        async def one(chat: Chat) -> ChatCursor | None:
            async with limit:
                return await self._start(chat, reads)

        async with asyncio.TaskGroup() as group:
            tasks = {chat.id: group.create_task(one(chat)) for chat in chats}
        return {c: cursor for c, task in tasks.items() if (cursor := task.result()) is not None}

    async def start_one(self, chat: Chat) -> ChatCursor | None:
        """``start`` for one chat: the cursor it now has, or None."""
        return (await self.start([chat])).get(chat.id)

    async def _start(self, chat: Chat, reads: _Reads) -> ChatCursor | None:
        if self.made_here(chat.id):
            return None
        try:
            newest = await self._newest(chat, reads)
            surface = newest is not None and self.clock() - newest.ts < self.fresh_for
            update = await self.ledger.start_watched_chat(chat.id, newest, surface_newest=surface)
        except _NoPreview:
            return None
        except (GraphError, StorageError) as exc:
            # No cursor yet: the sweep starts it later, or a reader's first sight does (with a host).
            log.warning(
                "chat's first watch wrote no cursor; the sweep tries again",
                extra={"chat_id": chat.id, "error": type(exc).__name__},
            )
            return None
        if not update.holds:
            log.warning(
                "chat's first watch wrote no cursor (%s); the sweep tries again",
                update.outcome.value,
                extra={"chat_id": chat.id},
            )
        return update.value if update.holds else None

    async def _newest(self, chat: Chat, reads: _Reads) -> Candidate | None:
        """The chat's newest message, from its preview, else from one paced read (None: empty)."""
        preview = chat.last_message_preview
        if preview is not None and preview.created_date_time is not None:
            return Candidate(preview.id, preview.created_date_time)
        if reads.left <= 0:
            raise _NoPreview
        reads.left -= 1
        await self.pacer.wait()
        # By creation, not modification: a reaction or an edit never makes an old message the newest.
        message = await self.conversations.newest(chat.id)
        return Candidate(message.id, message.created_date_time) if message is not None else None

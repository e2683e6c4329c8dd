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

Cost (SPEC §9): none on Graph. The newest message is the chat's preview on the role's own
``/me/chats`` page; a chat without one has no message (Graph documents a null preview for a chat
without messages), so its cursor has no watermark and its first message is new, as a reader's first
sight of an empty chat writes it. Should Graph ever leave the preview out of a chat that has messages,
the age bound keeps what that could bring back to the last 24 h. (A read of each such chat was tried:
at a cold start the roles on different replicas read the same chats within a second, which Graph's one
read a second per chat refused, in tests/fleet/test_fleet_shared_change_detection.py.) One blob write
per chat, once: an existing cursor is never touched (if_absent), so a first watch never moves a
watermark a replica wrote, and a corrupt cursor stays corrupt (unresolved, fail closed) for
``repair-chat``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta

from service.clock import Clock
from service.graph.models import Chat
from service.ledger.claims.chat_cursor import Candidate, ChatCursor
from service.ledger.claims.chat_ledger import ChatLedger
from service.storage.errors import StorageError
from service.workers.chat_state import OfferedMessage

log = logging.getLogger(__name__)

# Cursor writes in flight at once: a page of 50 new chats is one round of blob latency, not 50.
WRITES_AT_ONCE = 8


def _nowhere(chat_id: str) -> bool:
    return False


@dataclass
class FirstWatch:
    ledger: ChatLedger[OfferedMessage]
    clock: Clock
    fresh_for: timedelta  # Settings.first_sight_max_age_h: a newer newest message is delivered
    # create_chat made the chat on this replica and could not record it for the fleet (ChatBook):
    # its first sight is this replica's reader's, which surfaces its newest whatever its age.
    made_here: Callable[[str], bool] = _nowhere

    async def start(self, chats: Sequence[Chat]) -> dict[str, ChatCursor]:
        """Start the cursor of every chat in ``chats`` that has none. Returns the cursor each chat
        now has (ours, or one a replica wrote first), leaving out the chats that have none yet."""
        limit = asyncio.Semaphore(WRITES_AT_ONCE)

        async def one(chat: Chat) -> ChatCursor | None:
            async with limit:
                return await self._start(chat)

        async with asyncio.TaskGroup() as group:
            tasks = {chat.id: group.create_task(one(chat)) for chat in chats}
        return {c: cursor for c, task in tasks.items() if (cursor := task.result()) is not None}

    async def _start(self, chat: Chat) -> ChatCursor | None:
        if self.made_here(chat.id):
            return None
        preview = chat.last_message_preview
        newest = (
            Candidate(preview.id, preview.created_date_time)
            if preview is not None and preview.created_date_time is not None
            else None
        )
        if newest is None and preview is not None:
            return None  # a preview without its time: a reader's first sight decides
        surface = newest is not None and self.clock() - newest.ts < self.fresh_for
        try:
            update = await self.ledger.start_watched_chat(chat.id, newest, surface_newest=surface)
        except StorageError as exc:
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

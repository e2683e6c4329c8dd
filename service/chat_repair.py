"""Re-bootstrapping one chat whose shared cursor is corrupt, as a first sight does, never replaying.

A corrupt cursor stalls its chat on every replica: claims against it fail closed, and nothing
un-stalls it by itself. The repair writes the cursor a first sight writes when it surfaces nothing
(``baseline_cursor``), from the chat's newest message in Graph (newest by creation time, as first
sight reads it): the watermark at that message's creation time, that message recorded as seen.
Nothing the chat held at the repair is pushed; messages posted after it are, as usual. An empty chat
gets a cursor without a watermark, so its first message is new.

Why the newest message does not surface even when a first sight would (a person's, under 24 h): a
replica fetches what was modified strictly after its watermark, so a message left claimable exactly
at the watermark would never be fetched, and a watermark set earlier could let an older message
through. A repair has no host to hand it to either. It stays readable with ``read_teams_messages``.

The write is a compare-and-swap on the corrupt value's ETag: if anything changed the value after it
was read (another repair, say), the write fails and nothing is overwritten. ``plan_repair`` is the
pure rule; ``inspect_cursor`` and ``write_repair`` are the storage shell around it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from service.graph.models import ChatMessage
from service.ledger.claims.chat_cursor import (
    Candidate,
    ChatCursor,
    baseline_cursor,
    parse_chat_cursor,
    render_chat_cursor,
)
from service.clock import as_utc
from service.domain.conversation import TEAMS_CHATS
from service.storage.backend import MemoryBackend


class CursorState(str, Enum):
    READABLE = "readable"  # nothing to repair
    ABSENT = "absent"  # no cursor: a replica bootstraps the chat when it first sees it
    CORRUPT = "corrupt"  # the stalled case the repair is for
    NO_ETAG = "no_etag"  # a value without an ETag cannot be replaced by compare-and-swap


@dataclass(frozen=True)
class StoredCursor:
    """What the store holds for one chat's cursor, with the ETag a repair must match."""

    key: str
    state: CursorState
    etag: str | None = None
    problem: str | None = None  # why it does not parse (field names, never message text)
    cursor: ChatCursor | None = None


async def inspect_cursor(backend: MemoryBackend, chat_id: str) -> StoredCursor:
    """Read the cursor raw (the ledger's own read drops the ETag of a corrupt value). StorageError propagates."""
    key = TEAMS_CHATS.cursor_key(chat_id)
    content, etag = await backend.read_text_with_etag(key)
    if content is None:
        return StoredCursor(key, CursorState.ABSENT)
    if etag is None:
        return StoredCursor(key, CursorState.NO_ETAG)
    try:
        cursor = parse_chat_cursor(content)
    except ValueError as exc:
        return StoredCursor(key, CursorState.CORRUPT, etag=etag, problem=str(exc))
    return StoredCursor(key, CursorState.READABLE, etag=etag, cursor=cursor)


@dataclass(frozen=True)
class RepairPlan:
    chat_id: str
    cursor: ChatCursor
    newest: ChatMessage | None

    def describe(self, now: datetime) -> list[str]:
        if self.newest is None:
            return [
                "the chat has no messages: the new cursor has no watermark, so its first message is new"
            ]
        created = as_utc(self.newest.created_date_time)
        hours = (as_utc(now) - created).total_seconds() / 3600
        return [
            f"newest message {self.newest.id}, created {created.isoformat()} ({hours:.1f} h ago)",
            f"new watermark {created.isoformat()}: that message and every older one count as seen and are "
            "never pushed (read_teams_messages still reads them); messages posted after it are pushed",
        ]


def plan_repair(chat_id: str, newest: ChatMessage | None, *, now: datetime) -> RepairPlan:
    """The cursor a first sight writes for a chat whose newest message is ``newest``, surfacing nothing."""
    seen = [] if newest is None else [Candidate(newest.id, newest.created_date_time)]
    return RepairPlan(chat_id, baseline_cursor(seen, now=now), newest)


async def write_repair(backend: MemoryBackend, stored: StoredCursor, plan: RepairPlan) -> str:
    """Replace the corrupt value with the plan's cursor, only if it is still the value that was read.

    Raises ConcurrencyError when the value changed since (nothing written), StorageError otherwise.
    """
    if stored.state is not CursorState.CORRUPT or stored.etag is None:
        raise ValueError(
            f"only a corrupt cursor with an ETag is repaired, not a {stored.state.value} one"
        )
    return await backend.write_text(
        stored.key, render_chat_cursor(plan.cursor), if_match=stored.etag
    )

"""Re-bootstrapping one chat whose shared cursor is corrupt, under the first-sight rules.

A corrupt cursor stalls its chat on every replica: claims against it fail closed, and nothing
un-stalls it by itself. The repair writes the cursor a first sight would have written, from the
chat's newest message in Graph (the newest by creation time, as first sight reads it):

* the watermark is that message's creation time, so nothing older is ever delivered;
* the newest message itself stays claimable only when first sight would surface it (a person's
  message under ``first_sight_max_age``); otherwise it is recorded as seen;
* an empty chat gets a cursor without a watermark, so its first message is new.

The write is a compare-and-swap on the corrupt value's ETag: if anything changed the value after it
was read (another repair, say), the write fails and nothing is overwritten. ``plan_repair`` is the
pure rule; ``inspect_cursor`` and ``write_repair`` are the storage shell around it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum

from service.delivery.filters import filter_human_messages
from service.graph.models import ChatMessage
from service.ledger.chat_cursor import (
    Candidate,
    ChatCursor,
    baseline_cursor,
    cursor_key,
    parse_chat_cursor,
    render_chat_cursor,
)
from service.ledger.clock import as_utc
from service.storage.backend import MemoryBackend
from service.workers.agent import AgentUser
from service.workers.chat_state import first_sight_surfaces


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
    key = cursor_key(chat_id)
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
    surfaces: bool  # the newest message stays claimable: a host receives it after the repair

    def describe(self, now: datetime) -> list[str]:
        if self.newest is None:
            return ["the chat has no messages: the new cursor has no watermark, so its first message is new"]
        created = as_utc(self.newest.created_date_time)
        hours = (as_utc(now) - created).total_seconds() / 3600
        lines = [f"newest message {self.newest.id}, created {created.isoformat()} ({hours:.1f} h ago)",
                 f"new watermark {created.isoformat()}: no older message will be delivered"]
        if self.surfaces:
            lines.append(f"message {self.newest.id} stays claimable, as on a first sight (a person's message "
                         "under the first-sight age): the next replica with a host delivers it")
        else:
            lines.append(f"message {self.newest.id} counts as seen (too old, or not a person's, to surface "
                         "on a first sight); it stays readable with read_teams_messages")
        return lines


def plan_repair(
    chat_id: str, newest: ChatMessage | None, agent: AgentUser, *, now: datetime, max_age: timedelta
) -> RepairPlan:
    """The cursor a first sight would write for a chat whose newest message is ``newest``."""
    if newest is None:
        return RepairPlan(chat_id, baseline_cursor([], now=now), None, surfaces=False)
    live = [newest] if newest.deleted_date_time is None else []
    person = bool(filter_human_messages(live, agent_upn=agent.upn, agent_object_id=agent.object_id))
    surfaces = person and first_sight_surfaces(newest, now=now, max_age=max_age, regardless_of_age=False)
    if surfaces:
        # The watermark at its creation time with its id not recorded: claimable by exactly the
        # rule a claim applies (ts >= last_ts, not recorded), while everything older is behind.
        cursor = ChatCursor(last_ts=as_utc(newest.created_date_time), bootstrapped=True, last_written_at=as_utc(now))
    else:
        cursor = baseline_cursor([Candidate(newest.id, newest.created_date_time)], now=now)
    return RepairPlan(chat_id, cursor, newest, surfaces)


async def write_repair(backend: MemoryBackend, stored: StoredCursor, plan: RepairPlan) -> str:
    """Replace the corrupt value with the plan's cursor, only if it is still the value that was read.

    Raises ConcurrencyError when the value changed since (nothing written), StorageError otherwise.
    """
    if stored.state is not CursorState.CORRUPT or stored.etag is None:
        raise ValueError(f"only a corrupt cursor with an ETag is repaired, not a {stored.state.value} one")
    return await backend.write_text(stored.key, render_chat_cursor(plan.cursor), if_match=stored.etag)

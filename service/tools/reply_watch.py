"""``watch_teams_replies``' own memory: per MCP session, per chat, which replies it has already returned.

Deliberately not the shared chat cursors: this fallback pull must never claim, advance or consume
anything the delivery path relies on, so it keeps an independent, in-memory dedup state that dies with
the replica (a restart only means one call may return a reply again).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from service.graph.models import ChatMessage

SEEN_TAIL = 200  # ids remembered per session and chat
MAX_SESSIONS = 256  # least recently used sessions beyond this are forgotten
# Fetch a little before the newest reply returned: Graph compares at millisecond precision, and a
# message stamped in the same instant must not be skipped (the seen ids drop the repeats).
OVERLAP = timedelta(seconds=1)


@dataclass
class ChatWatch:
    """One session's view of one chat."""

    last_ts: datetime | None = None  # creation time of the newest reply returned
    seen: deque[str] = field(default_factory=lambda: deque(maxlen=SEEN_TAIL))

    @property
    def started(self) -> bool:
        return self.last_ts is not None

    def floor(self, since: datetime | None) -> datetime | None:
        """Only messages created after this are new: the later of ``since`` and the last reply returned."""
        mine = self.last_ts - OVERLAP if self.last_ts is not None else None
        if since is None or mine is None:
            return since or mine
        return max(since, mine)

    def fresh(
        self, humans_oldest_first: Sequence[ChatMessage], floor: datetime | None
    ) -> list[ChatMessage]:
        return [
            m
            for m in humans_oldest_first
            if m.id not in self.seen and (floor is None or m.created_date_time > floor)
        ]

    def mark(self, returned: Sequence[ChatMessage]) -> None:
        for message in returned:
            self.seen.append(message.id)
            if self.last_ts is None or message.created_date_time > self.last_ts:
                self.last_ts = message.created_date_time


class ReplyWatches:
    def __init__(self, *, max_sessions: int = MAX_SESSIONS) -> None:
        self._max_sessions = max_sessions
        self._sessions: OrderedDict[str, dict[str, ChatWatch]] = OrderedDict()

    def of(self, session_id: str | None, chat_id: str) -> ChatWatch:
        key = session_id or ""  # calls outside a session share one anonymous view
        chats = self._sessions.pop(key, None) or {}
        self._sessions[key] = chats
        while len(self._sessions) > self._max_sessions:
            self._sessions.popitem(last=False)
        return chats.setdefault(chat_id, ChatWatch())

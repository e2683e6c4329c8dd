"""Why a replica reads a chat from Graph: a hint it took (SPEC §9), or a doubt of its own.

A wanted read is satisfied by a read of the chat that began after the want was learned and that
decided everything it found, or by the fleet's cursor already covering what the hint saw (another
replica claimed it). Until then it stays, so a failed read, a replica without a target, or a write in
doubt delays the message and never drops it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from service.ledger.claims.chat_cursor import ChatCursor
from service.ledger.fleet.hints import Hint
from service.ledger.fleet.leases import Lease

# Hint sources whose time and id (when it has one) are the chat's newest message (a preview); a
# notification's hint carries the time it was received, so it can only say "look".
PREVIEW_SOURCES = frozenset({"scan", "sweep"})
# A rotation's hint (service.workers.channel_watch) says only "look now", at a steady pace: one reader
# for the fleet is what it is for. The replica first in turn reads; the others settle it unread, since
# a read that finds nothing leaves no trace in the cursor to tell them it was made. Should the first
# have no host, the conversation waits for its next turn in the rotation (another replica's turn then:
# the order follows the hint's time) or a notification: delay, never a loss, as the cursor did not move.
ROTATION_SOURCE = "rotation"
RETRY_S = 5.0  # a claim in doubt: the chat is read again this often until it settles
FAILED_RETRY_S = 2.0
UNRESOLVED_RETRY_S = 10.0  # an unreadable cursor (corrupt ones are counted and shown in /readyz)
BEHIND_RETRY_S = 30.0
WATCHED_RELOAD_S = 5.0


class FleetRole(Protocol):
    """A fleet-singleton role whose turn comes with the chat poll (it acts only while it holds its lease)."""

    @property
    def lease(self) -> Lease: ...

    async def cycle(self) -> None: ...


@dataclass
class WantedRead:
    newest: datetime | None  # the newest message time the hint saw (None: read regardless)
    message_id: str | None
    is_preview: bool  # newest and message_id describe the chat's newest message
    learned_at: float  # monotonic
    not_before: float = 0.0
    # The sweep's hint for a chat that had no cursor and no preview: it asks for a first sight only,
    # which any cursor now present means some replica made.
    first_sight_only: bool = False
    # A replica that is not first in turn for the chat waits for the ones before it in two steps (its
    # turn, then one more gap after a cursor read that found the chat still uncovered); how many of
    # them are done. Kept as ``not_before`` so the wait holds up no other chat's read.
    turn_waits: int = 0
    # Only the replica first in turn reads it (ROTATION_SOURCE); any other hint merged in lifts that.
    first_turn_only: bool = False
    # The hint's trace (its writer's span): the read, claim and push it leads to join that trace.
    traceparent: str | None = None

    @classmethod
    def from_hint(cls, hint: Hint, learned_at: float) -> WantedRead:
        preview = hint.source in PREVIEW_SOURCES and hint.message_id is not None
        first_sight_only = hint.source == "sweep" and hint.message_id is None
        return cls(
            hint.newest,
            hint.message_id,
            preview,
            learned_at,
            first_sight_only=first_sight_only,
            first_turn_only=hint.source == ROTATION_SOURCE,
            traceparent=hint.traceparent,
        )

    def merged(self, earlier: WantedRead | None) -> WantedRead:
        """One want per chat: the newest of what was seen, learned at the latest moment (the read must
        begin after it), and no sooner than the earlier want allowed."""
        if earlier is None:
            return self
        if earlier.newest is None or (self.newest is not None and self.newest >= earlier.newest):
            newest, message_id, is_preview = self.newest, self.message_id, self.is_preview
            traceparent = self.traceparent or earlier.traceparent
        else:
            newest, message_id, is_preview = earlier.newest, earlier.message_id, earlier.is_preview
            traceparent = earlier.traceparent or self.traceparent
        # The turn already waited is kept: a chat hinted again and again must not push a later turn's
        # read back each time (the first in turn reads each new hint at once anyway).
        return WantedRead(
            newest,
            message_id,
            is_preview,
            max(self.learned_at, earlier.learned_at),
            max(self.not_before, earlier.not_before),
            first_sight_only=self.first_sight_only and earlier.first_sight_only,
            turn_waits=max(self.turn_waits, earlier.turn_waits),
            first_turn_only=_only_first_turn(self, earlier),
            traceparent=traceparent,
        )

    def covered_by_watermark(self, watermark: datetime | None) -> bool:
        """This replica's own steady watermark for the chat already covers it (no I/O)."""
        return (
            self.is_preview
            and self.newest is not None
            and watermark is not None
            and watermark >= self.newest
        )

    def covered_by_cursor(self, cursor: ChatCursor) -> bool:
        """The fleet's cursor covers it. A preview is covered when the fleet's watermark reached it
        (everything up to it is decided), not when its message is merely recorded: a sponsor wait
        claims ahead of a message left for a push host. A notification names one message: covered
        once that message is recorded (its neighbours have notifications of their own)."""
        if self.first_sight_only:
            return True
        if self.is_preview:
            return (
                self.newest is not None
                and cursor.last_ts is not None
                and cursor.last_ts >= self.newest
            )
        return self.message_id is not None and cursor.is_recorded(self.message_id)

    def preview_hint(self, chat_id: str) -> Hint | None:
        """The hint as a preview for first sight, when it is one."""
        if not self.is_preview or self.newest is None or self.message_id is None:
            return None
        return Hint(chat_id, self.newest, self.message_id, "scan")


def _only_first_turn(a: WantedRead, b: WantedRead) -> bool:
    """Merged wants leave a read to the first in turn when every one that asks for a look does (a
    first-sight-only want asks for none: any cursor settles it)."""
    looks = [w for w in (a, b) if not w.first_sight_only]
    return bool(looks) and all(w.first_turn_only for w in looks)


@dataclass(frozen=True)
class Behind:
    """A read that left a message for a target this replica did not have."""

    generation: int  # the hub's target generation then
    since: float  # monotonic
    newest: datetime

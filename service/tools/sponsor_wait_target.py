"""SponsorWaitTarget: a pending sponsor wait, as a delivery target that takes a bounded hand-over.

A non-push host's wait ends with one tool result, so what the replica claims for it must fit in that
result: the hub allots the wait messages (``room_for``, ``allotted``) before they are claimed, and
claims only those. A wait takes, in one hand-over:

- **backlog**: sponsor messages written before the wait began (a sponsor who wrote while no host was
  connected), oldest first, at most ``BacklogBounds.max_items`` and ``max_chars`` of text; what does
  not fit is not claimed and stays in Graph for the next wait or a push host;
- **the reply**: at most one message written after the wait began (another stays for the next wait).

The hand-over is complete once something has been handed over and every message the hub allotted
has arrived: a wait never returns while a claim made for it is still on its way to it, so its result
carries everything claimed for it. An allotted message that never arrives is waited for at most
``handoff_s``: another replica claimed it first, the claim failed, or another replica had claimed it
earlier (ahead of a chat watermark held back by someone else's message, the chat poll offers such a
message again; this replica's hub leaves out what it handed over itself, not what others did). Once the
wait has ended nothing more is taken (``deliver`` answers False and the hub offers the message elsewhere).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from service.delivery.hub import Handover, TargetKind
from service.domain.message import InboundMessage, MessageKey, Source
from service.tools.message_items import MAX_ITEM_CHARS

# A message Teams stamped this little before the wait began was written while the call was on its way.
BACKLOG_GRACE = timedelta(seconds=5)
# Between the hub's allotment and the hand-over lies one claim (a compare-and-swap write, retried on
# a conflict): seconds at worst. Waiting longer for an allotted message only delays the result.
HANDOFF_S = 10.0


@dataclass(frozen=True)
class BacklogBounds:
    """How much backlog one wait's result carries: enough to see what was missed, small enough for a
    model's context (each item is at most MAX_ITEM_CHARS on its own)."""

    max_items: int = 10
    max_chars: int = 24_000

    def __post_init__(self) -> None:
        if self.max_items < 1 or self.max_chars < MAX_ITEM_CHARS:
            raise ValueError(
                f"a wait must take at least one backlog item of up to {MAX_ITEM_CHARS} characters"
            )


def carried_chars(message: InboundMessage) -> int:
    """The text one item carries in the result (a longer body is cut to MAX_ITEM_CHARS)."""
    return min(len(message.body), MAX_ITEM_CHARS)


@dataclass(eq=False)
class SponsorWaitTarget:
    session_id: str | None
    began: (
        datetime  # the wait's start on the replica's clock: what was written before it is backlog
    )
    bounds: BacklogBounds = field(default_factory=BacklogBounds)
    handoff_s: float = HANDOFF_S
    monotonic: Callable[[], float] = time.monotonic
    _held: list[InboundMessage] = field(default_factory=list)  # handed over, in the order they came
    _expected: dict[MessageKey, tuple[InboundMessage, float]] = field(
        default_factory=dict
    )  # -> (message, until)
    _left_out: bool = False  # backlog did not fit: more may be waiting
    _closed: bool = False
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _id: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def target_id(self) -> str:
        return f"sponsor_wait:{self.session_id or '-'}:{self._id}"

    @property
    def kind(self) -> TargetKind:
        return TargetKind.SPONSOR_WAIT

    def is_alive(self) -> bool:
        return not self._closed

    def accepts(self, message: InboundMessage) -> bool:
        return message.source is Source.CHAT and message.sender_is_sponsor

    def is_backlog(self, message: InboundMessage) -> bool:
        return message.created < self.began - BACKLOG_GRACE

    @property
    def left_out(self) -> bool:
        """Backlog was left unclaimed because the result was full (it stays for the next wait)."""
        return self._left_out

    def room_for(self, message: InboundMessage, alongside: Sequence[InboundMessage]) -> bool:
        taken = [*self._held, *self._pending(), *alongside]
        if not self.is_backlog(message):
            return not any(not self.is_backlog(m) for m in taken)
        backlog = [m for m in taken if self.is_backlog(m)]
        return (
            len(backlog) < self.bounds.max_items
            and sum(map(carried_chars, backlog)) + carried_chars(message) <= self.bounds.max_chars
        )

    def allotted(self, taken: Sequence[InboundMessage], left: Sequence[InboundMessage]) -> None:
        until = self.monotonic() + self.handoff_s
        for message in taken:
            self._expected[message.key] = (message, until)
        self._left_out = self._left_out or any(self.is_backlog(m) for m in left)
        self._changed.set()

    async def deliver(self, message: InboundMessage) -> Handover:
        if self._closed:  # ended since the claim: let the hub try another target
            return Handover.NOT_TAKEN
        if self._expected.pop(message.key, None) is None and not self.room_for(message, ()):
            return (
                Handover.NOT_TAKEN
            )  # not allotted here (claimed for a push host beside the wait), no room left
        self._held.append(message)
        self._changed.set()
        return Handover.TAKEN

    @property
    def held(self) -> list[InboundMessage]:
        """What was handed over to this wait so far, in the order it came."""
        return list(self._held)

    def _pending(self) -> list[InboundMessage]:
        now = self.monotonic()
        return [m for m, until in self._expected.values() if until > now]

    async def handed_over(self, timeout_s: float) -> list[InboundMessage]:
        """What was handed over, once the hand-over is complete (see the module docstring) or at the
        timeout (then possibly nothing); the wait takes nothing after. Cancelling the caller ends it too."""
        deadline = self.monotonic() + timeout_s
        try:
            while True:
                now = self.monotonic()
                pending = [until for _, until in self._expected.values() if until > now]
                if (self._held and not pending) or now >= deadline:
                    return list(self._held)
                self._changed.clear()
                try:
                    await asyncio.wait_for(self._changed.wait(), min([deadline, *pending]) - now)
                except TimeoutError:
                    pass
        finally:
            self._closed = True

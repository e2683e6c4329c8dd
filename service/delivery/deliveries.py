"""One record per message this replica is claiming or has claimed, from the allotment to the hand-over.

The hub asks these records, never a table of its own: whether a bounded target's room is taken for a
message (allotted), whose acknowledging host a claim about to be written is for (reserved), whether a
message was handed over here already (a chat read again offers it once more), and which claimed
messages a target gave back unanswered. Each transition is one method; the record's stage says where
the message stands. What a host is owed after the hand-over lives in its delivery record in the
container (service.delivery.host_record), shared by the fleet.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum

from service.domain.message import InboundMessage, MessageKey

# How many records are kept: a chat read again within minutes offers its handed-over messages again,
# and the newest few thousand cover that. Records that still promise something (allotted, returned)
# are never dropped for room.
MEMORY = 8192


class Stage(str, Enum):
    ALLOTTED = "allotted"  # a bounded target's room holds it; its claim comes next
    RESERVED = "reserved"  # an acknowledging host's: its intent is written before the claim
    CLAIMED = "claimed"  # its claim landed; being handed over
    HANDED_OVER = "handed_over"  # a target has it (or may): never allotted or offered again
    RETURNED = "returned"  # a target gave it back unanswered: the next target that accepts takes it
    PUSHED = "pushed"  # pushed to a session of its acknowledging host, until acknowledged

    @property
    def claimed_here(self) -> bool:
        """This replica claimed it: the claim is never offered again, whatever a re-read shows."""
        return self in (Stage.CLAIMED, Stage.HANDED_OVER, Stage.RETURNED, Stage.PUSHED)

    @property
    def kept(self) -> bool:
        """A promise still open: never dropped to make room."""
        return self in (Stage.ALLOTTED, Stage.RETURNED, Stage.PUSHED)


@dataclass
class Push:
    """A message's pushes to its host: redelivered while unacknowledged (service.delivery.host_keeper)."""

    session_id: str  # the session of the newest push
    first_at: float  # monotonic: the acknowledgement latency counts from here
    last_at: float
    count: int  # pushes into ``session_id``


@dataclass
class Delivery:
    message: InboundMessage
    stage: Stage
    target_id: str | None = None  # ALLOTTED: the bounded target whose room it took
    host_id: str | None = None  # RESERVED, PUSHED: the acknowledging host it is owed to
    push: Push | None = None  # PUSHED


@dataclass
class Deliveries:
    memory: int = MEMORY

    def __post_init__(self) -> None:
        self._records: OrderedDict[MessageKey, Delivery] = OrderedDict()

    def get(self, key: MessageKey) -> Delivery | None:
        return self._records.get(key)

    def claimed_here(self, message: InboundMessage) -> bool:
        record = self._records.get(message.key)
        return record is not None and record.stage.claimed_here

    def allotted_to(self, message: InboundMessage) -> str | None:
        record = self._records.get(message.key)
        return record.target_id if record is not None and record.stage is Stage.ALLOTTED else None

    def reserved_for(self, message: InboundMessage) -> str | None:
        record = self._records.get(message.key)
        return record.host_id if record is not None and record.stage is Stage.RESERVED else None

    # --- transitions ---

    def allot(self, message: InboundMessage, target_id: str) -> None:
        self._put(Delivery(message, Stage.ALLOTTED, target_id=target_id))

    def reserve(self, message: InboundMessage, host_id: str) -> None:
        self._put(Delivery(message, Stage.RESERVED, host_id=host_id))

    def unreserve(self, messages: Iterable[InboundMessage]) -> None:
        """Their claim did not land: they are nobody's yet."""
        for message in messages:
            if self.reserved_for(message) is not None:
                del self._records[message.key]

    def claim(self, message: InboundMessage) -> None:
        """The dispatch takes it: an allotment or a reservation is used up."""
        self._put(Delivery(message, Stage.CLAIMED))

    def handed_over(self, message: InboundMessage) -> None:
        self._put(Delivery(message, Stage.HANDED_OVER))

    def returned(self, messages: Iterable[InboundMessage]) -> None:
        """Given back unanswered (oldest of them taken first); one already waiting keeps its place."""
        for message in messages:
            record = self._records.get(message.key)
            if record is None or record.stage is not Stage.RETURNED:
                self._put(Delivery(message, Stage.RETURNED))

    def take_returned(self, takeable: Callable[[InboundMessage], bool]) -> list[InboundMessage]:
        """The returned messages ``takeable`` says a live target accepts, in the order they came back;
        they are being handed over again (a dispatch that finds no target returns them)."""
        taken = [
            r.message
            for r in self._records.values()
            if r.stage is Stage.RETURNED and takeable(r.message)
        ]
        for message in taken:
            self._records[message.key].stage = Stage.CLAIMED
        return taken

    def release_target(self, target_id: str) -> None:
        """A bounded target went away: what was allotted to it is nobody's (it was never claimed)."""
        for key in [
            k
            for k, r in self._records.items()
            if r.stage is Stage.ALLOTTED and r.target_id == target_id
        ]:
            del self._records[key]

    def pushed(self, message: InboundMessage, host_id: str, session_id: str, now: float) -> None:
        """A session of ``host_id`` took a push of it; a push into a new session counts from one."""
        record = self._records.get(message.key)
        mark = record.push if record is not None and record.host_id == host_id else None
        if mark is None or mark.session_id != session_id:
            mark = Push(session_id, now, now, 1)
        else:
            mark.last_at, mark.count = now, mark.count + 1
        self._put(Delivery(message, Stage.PUSHED, host_id=host_id, push=mark))

    def push_of(self, key: MessageKey, host_id: str) -> Push | None:
        record = self._records.get(key)
        if record is None or record.stage is not Stage.PUSHED or record.host_id != host_id:
            return None
        return record.push

    def acknowledged(self, key: MessageKey, host_id: str) -> Push | None:
        """The host has it: its push record ends here; the pushes it had, if this replica made any."""
        mark = self.push_of(key, host_id)
        if mark is not None:
            self._records[key].stage, self._records[key].push = Stage.HANDED_OVER, None
        return mark

    def forget_pushes(self, host_id: str) -> None:
        """The host's session ended here: a later session of it starts from what its record owes."""
        for record in self._records.values():
            if record.stage is Stage.PUSHED and record.host_id == host_id:
                record.stage, record.push = Stage.HANDED_OVER, None

    def _put(self, record: Delivery) -> None:
        self._records[record.message.key] = record
        self._records.move_to_end(record.message.key)
        while len(self._records) > self.memory:
            oldest = next((k for k, r in self._records.items() if not r.stage.kept), None)
            if oldest is None:
                return
            del self._records[oldest]

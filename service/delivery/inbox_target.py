"""An inbox host as this replica knows it, and as a target of the hub.

The target takes every message for its host: the hub reserves it for the host (an acknowledging
target), so its claim writes it into the host's record first (service.delivery.claim_intents); the
hand-over only wakes the host's waiting call here, if any. Whether it is alive, the inbox decides
(``Inbox.takes_for``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from service.clock import format_timestamp
from service.delivery.host_record import HostRecord
from service.delivery.targets import Handover, TargetKind
from service.domain.message import InboundMessage, MessageKey

# This replica's own claims for a host, remembered until a call returns them: a waiting call takes
# such an entry at once, before anyone settled its intent from the cursor.
LANDED_KEPT = 1024


@dataclass
class InboxHost:
    host_id: str
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    waiting: int = 0  # calls of this host in progress here
    turn: int = 0  # the newest call's number: an older call still waiting ends
    last_call: datetime | None = None
    view: HostRecord | None = None  # the newest record a call or the scan saw
    about: dict[str, str] = field(default_factory=dict)  # client, version, protocol era
    _landed: deque[MessageKey] = field(default_factory=lambda: deque(maxlen=LANDED_KEPT))

    def next_turn(self) -> int:
        self.turn += 1
        self.wake.set()
        return self.turn

    @property
    def landed(self) -> frozenset[MessageKey]:
        return frozenset(self._landed)

    def landed_here(self, key: MessageKey) -> None:
        self._landed.append(key)
        self.wake.set()

    def forget_landed(self, keys: Iterable[MessageKey]) -> None:
        gone = set(keys)
        kept = [k for k in self._landed if k not in gone]
        self._landed.clear()
        self._landed.extend(kept)

    def called(self, at: datetime, record: HostRecord) -> None:
        self.last_call, self.view = at, record

    def shown(self, *, claims_here: bool, owed: dict[str, int]) -> dict[str, Any]:
        return {
            "id": self.host_id,
            "kind": "inbox",
            "client": {k: v for k, v in self.about.items() if k in ("name", "version")},
            "protocol": self.about.get("protocol", ""),
            "last_call": format_timestamp(self.last_call) if self.last_call else None,
            "calling_now": self.waiting > 0,
            "claims_here": claims_here,
            "owed_by_age": owed,
        }


class InboxOwner(Protocol):
    """What the target asks of the inbox (service.delivery.inbox.Inbox)."""

    def takes_for(self, host_id: str) -> bool: ...

    def knows(self, host_id: str) -> bool: ...

    async def handed(self, host_id: str, message: InboundMessage) -> Handover: ...


class InboxTarget:
    """The hub's view of one inbox host on this replica."""

    def __init__(self, inbox: InboxOwner, host_id: str) -> None:
        self._inbox = inbox
        self._host_id = host_id

    @staticmethod
    def id_of(host_id: str) -> str:
        return f"inbox:{host_id}"

    @property
    def target_id(self) -> str:
        return self.id_of(self._host_id)

    @property
    def kind(self) -> TargetKind:
        return TargetKind.INBOX

    @property
    def host_id(self) -> str:
        return self._host_id

    def is_alive(self) -> bool:
        return self._inbox.takes_for(self._host_id)

    def is_reading(self) -> bool:
        return self._inbox.knows(self._host_id)

    def accepts(self, message: InboundMessage) -> bool:
        return True

    def room_for(self, message: InboundMessage, alongside: Sequence[InboundMessage]) -> bool:
        return True

    def allotted(self, taken: Sequence[InboundMessage], left: Sequence[InboundMessage]) -> None:
        """Never told: an inbox is not a bounded target."""

    async def deliver(self, message: InboundMessage) -> Handover:
        """In the host's record, a waiting call here returns it at once."""
        return await self._inbox.handed(self._host_id, message)

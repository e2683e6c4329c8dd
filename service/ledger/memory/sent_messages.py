"""The agent's own chat messages in delegated mode, recorded for the whole fleet: one record per chat.

In delegated mode Graph attributes the agent's posts to the person it acts for, so only a record of what
the agent sent tells its words from the person's (``service.graph.authorship``), on every replica: the
one that sent a message is rarely the one that reads the chat next. Key
``sent_messages/<url-quoted chat id>.json``::

    {"sent": [{"id", "at"}, ...],                        newest first, at most SENT_KEPT
     "pending": [{"send", "replica", "since", "until"}]}  sends in flight

A send is two compare-and-swap writes around the POST (``cas.update_value``: If-Match, If-None-Match
for the first, re-read on a conflict; both changes are idempotent, so a write in doubt is settled by
the re-read):

* ``begin``, before the POST: a pending entry. A replica that reads the chat meanwhile and finds a
  message of the person's it cannot place holds it (decides nothing past it) until the send settles.
  If the entry cannot be written, nothing is posted: a post no replica can place is exactly what
  this record exists to prevent.
* ``settle``, after it: the posted id in, the pending entry out. Should that write fail, the entry
  expires at ``until`` and the ``[EntraBot]`` prefix places the message (authorship rule 3); this
  replica keeps the id in memory either way.

Bounded: SENT_KEPT ids per chat (the oldest go first; long before, the chat's cursor decided them for
the fleet) and pending entries by their expiry. Ids and times only: never a body.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from urllib.parse import quote

from service.clock import Clock, format_timestamp, utc_now
from service.graph.authorship import SentView
from service.ledger.records.cas import count_conflicts, update_value
from service.ledger.records.fields import load_object, require_str, require_timestamp
from service.ledger.records.reads import CorruptValueError, ReadOutcome, read_parsed
from service.storage.backend import MemoryBackend
from service.telemetry.metrics import LedgerMetrics

log = logging.getLogger(__name__)

PREFIX = "sent_messages/"
SENT_KEPT = 200
# Longer than a send can take: two POSTs (Graph's 30 s timeout each) and the read-backs that settle them.
PENDING_TTL = timedelta(minutes=3)
# Every round of a race lets one writer through; replicas sending into one chat at once are few.
WRITE_ATTEMPTS = 10
_WHAT = "sent-messages record"
_LEDGER = "sent_messages"


def sent_key(chat_id: str) -> str:
    if not chat_id:
        raise ValueError("chat_id is empty; every sent-messages record belongs to one chat")
    return f"{PREFIX}{quote(chat_id, safe='')}.json"


@dataclass(frozen=True)
class SentId:
    message_id: str
    at: datetime


@dataclass(frozen=True)
class PendingSend:
    send_id: str
    replica: str
    since: datetime
    until: datetime


@dataclass(frozen=True)
class SentRecord:
    sent: tuple[SentId, ...] = ()
    pending: tuple[PendingSend, ...] = ()

    @property
    def ids(self) -> frozenset[str]:
        return frozenset(s.message_id for s in self.sent)

    def in_flight(self, now: datetime) -> tuple[PendingSend, ...]:
        return tuple(p for p in self.pending if p.until > now)

    def with_pending(self, send: PendingSend, now: datetime) -> SentRecord:
        """Expired entries go whenever the record is written, so they never pile up."""
        return replace(
            self, pending=(*(p for p in self.in_flight(now) if p.send_id != send.send_id), send)
        )

    def settled(self, send: PendingSend, message_id: str | None, now: datetime) -> SentRecord:
        sent = self.sent
        if message_id is not None and message_id not in self.ids:
            sent = (SentId(message_id, now), *sent)[:SENT_KEPT]
        return SentRecord(sent, tuple(p for p in self.in_flight(now) if p.send_id != send.send_id))


def parse_sent(text: str) -> SentRecord:
    obj = load_object(text, _WHAT)
    sent, pending = obj.get("sent", []), obj.get("pending", [])
    if (
        not isinstance(sent, list)
        or not isinstance(pending, list)
        or not all(isinstance(e, dict) for e in (*sent, *pending))
    ):
        raise CorruptValueError(f"{_WHAT}: fields 'sent' and 'pending' must be lists of objects")
    return SentRecord(
        tuple(SentId(require_str(e, "id", _WHAT), require_timestamp(e, "at", _WHAT)) for e in sent),
        tuple(
            PendingSend(
                require_str(e, "send", _WHAT),
                require_str(e, "replica", _WHAT),
                require_timestamp(e, "since", _WHAT),
                require_timestamp(e, "until", _WHAT),
            )
            for e in pending
        ),
    )


def render_sent(record: SentRecord) -> str:
    return json.dumps(
        {
            "sent": [{"id": s.message_id, "at": format_timestamp(s.at)} for s in record.sent],
            "pending": [
                {
                    "send": p.send_id,
                    "replica": p.replica,
                    "since": format_timestamp(p.since),
                    "until": format_timestamp(p.until),
                }
                for p in record.pending
            ],
        },
        sort_keys=True,
    )


class SentRecordUnavailable(Exception):
    """The record could not be written before a send: nothing may be posted (the module docstring)."""


@dataclass
class SentMessages:
    """The fleet's record (above) and what this replica itself sent, in memory, bounded per chat."""

    backend: MemoryBackend
    replica_id: str
    clock: Clock = utc_now
    metrics: LedgerMetrics = field(kw_only=True)
    _own: dict[str, deque[str]] = field(default_factory=dict)
    _own_in_flight: dict[str, dict[str, datetime]] = field(default_factory=dict)

    async def begin(self, chat_id: str) -> PendingSend:
        """A pending entry for a send about to be posted; SentRecordUnavailable when it is not recorded."""
        now = self.clock()
        send = PendingSend(uuid.uuid4().hex, self.replica_id, now, now + PENDING_TTL)
        self._own_in_flight.setdefault(chat_id, {})[send.send_id] = send.since

        def change(current: SentRecord | None) -> str | None:
            record = current or SentRecord()
            if any(p.send_id == send.send_id for p in record.pending):
                return None
            return render_sent(record.with_pending(send, self.clock()))

        update = await update_value(
            self.backend,
            sent_key(chat_id),
            parse=parse_sent,
            change=change,
            attempts=WRITE_ATTEMPTS,
        )
        count_conflicts(self.metrics, _LEDGER, update)
        if not update.holds:
            self._own_in_flight[chat_id].pop(send.send_id, None)
            raise SentRecordUnavailable(
                f"the fleet's record of sent messages for chat {chat_id} could not be "
                f"written ({update.outcome.value})"
            )
        return send

    async def settle(self, chat_id: str, send: PendingSend, message_id: str | None) -> bool:
        """The send's outcome (the posted id, or None when nothing was posted) into the record; this
        replica remembers the id whatever the store does. False when the record kept the pending entry."""
        if message_id is not None:
            self.remember(chat_id, message_id)
        self._own_in_flight.get(chat_id, {}).pop(send.send_id, None)

        def change(current: SentRecord | None) -> str | None:
            record = current or SentRecord()
            done = record.settled(send, message_id, self.clock())
            return None if done == record else render_sent(done)

        update = await update_value(
            self.backend,
            sent_key(chat_id),
            parse=parse_sent,
            change=change,
            attempts=WRITE_ATTEMPTS,
        )
        count_conflicts(self.metrics, _LEDGER, update)
        if not update.holds:
            log.warning(
                "a sent message was not recorded for the fleet; its pending entry expires by itself",
                extra={"chat_id": chat_id, "outcome": update.outcome.value},
            )
        return update.holds

    def remember(self, chat_id: str, message_id: str) -> None:
        ids = self._own.setdefault(chat_id, deque(maxlen=SENT_KEPT))
        if message_id not in ids:
            ids.appendleft(message_id)

    def known(self, chat_id: str, message_id: str) -> bool:
        """Whether this replica knows the agent sent ``message_id`` (sent it, or read it in the record)."""
        return message_id in self._own.get(chat_id, ())

    async def view(self, chat_id: str, placing: Iterable[str] = ()) -> SentView:
        """What the record says of the chat, read now when any of ``placing`` (ids of the person's
        messages) is not known here yet; ``SentView.unreadable()`` when it cannot be read."""
        own = frozenset(self._own.get(chat_id, ()))
        local_flight = tuple(self._own_in_flight.get(chat_id, {}).values())
        if all(message_id in own for message_id in placing):
            return SentView(own, local_flight)
        read = await read_parsed(self.backend, sent_key(chat_id), parse_sent)
        if read.outcome is ReadOutcome.UNRESOLVED:
            return SentView.unreadable()
        record = read.value or SentRecord()
        for message_id in record.ids:
            self.remember(chat_id, message_id)
        in_flight = tuple(p.since for p in record.in_flight(self.clock()))
        return SentView(own | record.ids, local_flight + in_flight)

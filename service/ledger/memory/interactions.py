"""The interaction log: ``interactions/<UTC YYYY-MM-DD>.jsonl``, one JSON record appended per event.

Every replica appends to the same day file (``append_text`` is atomic, so concurrent appenders
never lose a line). The log is the agent's own memory, so a record may carry the message body; it
is stored in the file only. ``Interaction.__repr__`` leaves the body out, and nothing here puts a
body or a summary into a process log line. Lines the single-host system wrote (its own field names,
``inbound``/``outbound``, ``teams_dm``…) read back too: ``single_host_records`` renames them first.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from enum import Enum
from typing import Any

from service.clock import Clock, as_utc, utc_now
from service.domain.source import Source
from service.ledger.records.fields import (
    ExtraFields,
    extra_fields,
    load_object,
    optional_str,
    require_str,
    require_timestamp,
    timestamp_text,
    with_extra,
)
from service.ledger.records.reads import CorruptValueError, Read, ReadOutcome, read_parsed
from service.ledger.memory.single_host_records import fleet_interaction_fields
from service.storage.backend import MemoryBackend
from service.storage.log_append import extend_log

log = logging.getLogger(__name__)

INTERACTIONS_PREFIX = "interactions/"
MAX_QUERY_DAYS = 92  # a query reads one file per day; this bounds one call
_KNOWN = (
    "ts",
    "direction",
    "channel",
    "action",
    "chat_id",
    "message_id",
    "sender",
    "summary",
    "body",
)
_WHAT = "interaction record"


class Direction(str, Enum):
    IN = "in"
    OUT = "out"


class Channel(str, Enum):
    """Where the interaction happened: a Teams chat, a team's channel or the mailbox (a message's
    ``Source``), or the single-host system's ``terminal`` (the agent's own CLI side), which the fleet
    reads but never writes."""

    CHAT = "chat"
    TEAM_CHANNEL = "channel"
    EMAIL = "email"
    TERMINAL = "terminal"

    @classmethod
    def of(cls, source: Source) -> Channel:
        return cls(source.value)


class Action(str, Enum):
    """The actions the service logs; records from other writers may carry others."""

    RECEIVED = "received"
    DELIVERED = "delivered"
    SENT = "sent"
    REPLIED = "replied"
    FORWARDED = "forwarded"  # the agent forwarded a mail
    SEND_UNCONFIRMED = (
        "send_unconfirmed"  # a send whose outcome Graph left unknown, and nothing could settle
    )
    EDITED = "edited"  # the agent replaced the text of one of its own messages
    DELETED = "deleted"  # the agent soft-deleted one of its own messages
    MEMBER_ADDED = "member_added"  # the agent added a person to a chat, at a sponsor's request
    PERMISSION_ASKED = "permission_asked"  # the sponsors were asked in Teams to approve a tool use
    VERDICT_RELAYED = (
        "verdict_relayed"  # a sponsor's allow or deny went back to the host that asked
    )
    SUMMARY_MAILED = "summary_mailed"  # the day's summary went to the sponsors (once per fleet)


@dataclass(frozen=True)
class Interaction:
    ts: datetime
    direction: Direction
    channel: Channel
    action: str
    chat_id: str | None = None
    message_id: str | None = None
    sender: str | None = None
    summary: str = ""
    body: str | None = field(
        default=None, repr=False
    )  # stored in the log file, never in a log line
    extra: ExtraFields = field(default=(), repr=False)

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "ts": timestamp_text(self.ts),
            "direction": self.direction.value,
            "channel": self.channel.value,
            "action": self.action,
            "chat_id": self.chat_id,
            "message_id": self.message_id,
            "sender": self.sender,
            "summary": self.summary,
        }
        if self.body is not None:
            obj["body"] = self.body
        return with_extra(obj, self.extra)


def _enum(obj: dict[str, Any], name: str, kind: type[Enum]) -> Any:
    try:
        return kind(obj.get(name))
    except ValueError:
        raise CorruptValueError(
            f"{_WHAT}: field {name!r} must be one of {[k.value for k in kind]}"
        ) from None


def interaction_from_json(record: dict[str, Any]) -> Interaction:
    obj = fleet_interaction_fields(record)
    summary = obj.get("summary", "")
    if not isinstance(summary, str):
        raise CorruptValueError(f"{_WHAT}: field 'summary' must be a string")
    return Interaction(
        ts=require_timestamp(obj, "ts", _WHAT),
        direction=_enum(obj, "direction", Direction),
        channel=_enum(obj, "channel", Channel),
        action=require_str(obj, "action", _WHAT),
        chat_id=optional_str(obj, "chat_id", _WHAT),
        message_id=optional_str(obj, "message_id", _WHAT),
        sender=optional_str(obj, "sender", _WHAT),
        summary=summary,
        body=optional_str(obj, "body", _WHAT),
        extra=extra_fields(obj, _KNOWN),
    )


def interaction_key(day: date) -> str:
    return f"{INTERACTIONS_PREFIX}{day.isoformat()}.jsonl"


def render_interaction(record: Interaction) -> str:
    return json.dumps(record.to_json()) + "\n"


@dataclass(frozen=True)
class DayLog:
    records: tuple[Interaction, ...]
    skipped_lines: int = 0  # lines that are not records (a torn write, another writer's garbage)


def parse_day_log(text: str) -> DayLog:
    records: list[Interaction] = []
    skipped = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            records.append(interaction_from_json(load_object(line, _WHAT)))
        except CorruptValueError:
            skipped += 1
    return DayLog(tuple(records), skipped)


@dataclass(frozen=True)
class InteractionQuery:
    """Filters; None matches anything. ``since``/``until`` bound the time, ``limit`` keeps the newest."""

    chat_id: str | None = None
    sender: str | None = None
    direction: Direction | None = None
    action: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    limit: int | None = None

    def matches(self, record: Interaction) -> bool:
        return (
            (self.chat_id is None or record.chat_id == self.chat_id)
            and (self.sender is None or record.sender == self.sender)
            and (self.direction is None or record.direction is self.direction)
            and (self.action is None or record.action == self.action)
            and (self.since is None or record.ts >= as_utc(self.since))
            and (self.until is None or record.ts < as_utc(self.until))
        )


def select(records: list[Interaction], query: InteractionQuery) -> tuple[Interaction, ...]:
    """The matching records, oldest first, the newest ``limit`` of them when a limit is set."""
    chosen = sorted((r for r in records if query.matches(r)), key=lambda r: r.ts)
    if query.limit is not None:
        chosen = chosen[-query.limit :] if query.limit > 0 else []
    return tuple(chosen)


@dataclass(frozen=True)
class InteractionRead:
    records: tuple[Interaction, ...]
    skipped_lines: int = 0
    unresolved_days: tuple[
        date, ...
    ] = ()  # day files that could not be read: the answer is partial


class InteractionLog:
    def __init__(self, backend: MemoryBackend, *, clock: Clock = utc_now) -> None:
        self._backend = backend
        self._clock = clock

    async def record(self, interaction: Interaction) -> bool:
        """Append one record to its day's file; False (and a warning) when the append failed.

        A day file the single-host system (or an earlier ``migrate``) wrote whole takes no appends; the
        record is then written with the file by compare-and-swap (``extend_log``).
        """
        key = interaction_key(as_utc(interaction.ts).date())
        try:
            added = await extend_log(self._backend, key, render_interaction(interaction))
        except Exception as exc:  # noqa: BLE001 - the log is memory, not delivery: report and go on
            log.warning(
                "could not append to %s (%s); the interaction is not logged",
                key,
                type(exc).__name__,
            )
            return False
        if not added:
            log.warning("%s kept changing under every rewrite; the interaction is not logged", key)
        return added

    async def read_day(self, day: date) -> Read[DayLog]:
        return await read_parsed(self._backend, interaction_key(day), parse_day_log)

    async def read(self, query: InteractionQuery = InteractionQuery()) -> InteractionRead:
        """Records matching ``query`` from the day files between ``since`` (default: today) and ``until``."""
        until = as_utc(query.until) if query.until is not None else self._clock()
        since = (
            as_utc(query.since)
            if query.since is not None
            else datetime.combine(as_utc(until).date(), datetime.min.time(), tzinfo=timezone.utc)
        )
        first, last = since.date(), as_utc(until).date()
        if (last - first).days >= MAX_QUERY_DAYS:
            raise ValueError(f"a query spans at most {MAX_QUERY_DAYS} days; narrow since/until")
        records: list[Interaction] = []
        skipped = 0
        unresolved: list[date] = []
        day = first
        while day <= last:
            read = await self.read_day(day)
            if read.outcome is ReadOutcome.UNRESOLVED:
                unresolved.append(day)
            elif read.value is not None:
                records.extend(read.value.records)
                skipped += read.value.skipped_lines
            day += timedelta(days=1)
        return InteractionRead(select(records, query), skipped, tuple(unresolved))

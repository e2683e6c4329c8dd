"""Change hints: "chat X has a message at least this new", written by whoever learns of a change
(a Graph change notification on any replica, the elected scanner, the safety sweep) and read by every
replica that holds a delivery target.

A hint is only a reason to look: the reader still compares it with the chat's cursor and reads the
chat from Graph before claiming anything, so a hint that is late, repeated, forged by a bug or lost
changes when a message is delivered, never whether or how often.

Shape, chosen for many cheap writers and cheap readers: one append blob per minute,
``hints/<YYYYMMDDTHHMM>.jsonl`` (UTC, by the writer's clock), one JSON object per line. A writer adds a
batch with one atomic append (no read, no race, no retry); a reader reads the current and the previous
minute's blob and takes the lines past what it has already seen, so one poll costs two small reads
whatever the number of writers or chats. Blobs of minutes past are never read again; on Azure the
storage account's lifecycle rule ``delete-old-hint-segments`` (deploy/bicep/modules/storage.bicep)
deletes them a day or two after their last append. Azurite has no lifecycle management, so a local
or demo store keeps its segments (1,440 a day) for as long as the store lives.

A hint carries its writer's trace (``p``, a W3C traceparent, when tracing is on), so the read, claim and
push it leads to on whichever replica join the trace of the scan or notification that found the change.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Protocol

from opentelemetry import trace

from service.clock import Clock, as_utc, format_timestamp, parse_timestamp, utc_now
from service.storage.backend import MemoryBackend
from service.storage.errors import StorageError
from service.telemetry.tracing import traceparent_now

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)

PREFIX = "hints/"
SEGMENT = timedelta(minutes=1)


def segment_key(moment: datetime) -> str:
    return f"{PREFIX}{as_utc(moment).strftime('%Y%m%dT%H%M')}.jsonl"


@dataclass(frozen=True, slots=True)
class Hint:
    chat_id: str
    newest: datetime  # the newest message time the writer saw (creation time)
    message_id: str | None = None
    source: str = "scan"  # scan | notification | sweep: for metrics and debugging only
    traceparent: str | None = None  # the writer's span (W3C trace context), set by HintLog.add
    # The conversation kind's hint tag (service.domain.conversation); None: a chat, as every hint was
    # before kinds, so old segments and old writers read the same.
    kind: str | None = None


def render_hints(hints: Iterable[Hint]) -> str:
    lines = []
    for h in hints:
        record = {"c": h.chat_id, "t": format_timestamp(h.newest), "s": h.source}
        if h.message_id is not None:
            record["m"] = h.message_id
        if h.traceparent is not None:
            record["p"] = h.traceparent
        if h.kind is not None:
            record["k"] = h.kind
        lines.append(json.dumps(record, separators=(",", ":"), sort_keys=True) + "\n")
    return "".join(lines)


def parse_hint_line(line: str) -> Hint | None:
    """A hint, or None for a line that is not one (torn, from a newer version, garbage): skipped,
    because a hint only ever speeds a read up; the safety sweep finds what a lost hint would have."""
    try:
        obj = json.loads(line)
        chat_id, newest = obj["c"], parse_timestamp(obj["t"])
    except (ValueError, KeyError, TypeError):
        return None
    message_id = obj.get("m")
    if (
        not isinstance(chat_id, str)
        or not chat_id
        or not (message_id is None or isinstance(message_id, str))
    ):
        return None
    source, kind = obj.get("s"), obj.get("k")
    if not (kind is None or isinstance(kind, str)):
        return None  # whose hint it is cannot be told: reading it as a chat's could read the wrong route
    traceparent = obj.get(
        "p"
    )  # only ever a trace link: one that is not a string is dropped, not the hint
    return Hint(
        chat_id,
        newest,
        message_id,
        source if isinstance(source, str) else "unknown",
        traceparent if isinstance(traceparent, str) else None,
        kind,
    )


class HintSource(Protocol):
    async def poll(self) -> list[Hint] | None:
        """The hints written since the last poll; None when they could not be read."""
        ...


@dataclass
class HintLog:
    """The writing side."""

    backend: MemoryBackend
    clock: Clock = utc_now

    async def add(self, hints: Iterable[Hint]) -> None:
        """One atomic append; raises StorageError (the caller decides whether to answer Graph 5xx).
        Each hint carries this write's span, the parent of what its readers do with it."""
        with tracer.start_as_current_span("hints.add") as span:
            parent = traceparent_now()
            stamped = [
                h if h.traceparent is not None else replace(h, traceparent=parent) for h in hints
            ]
            span.set_attribute("entrabot.hints", len(stamped))
            text = render_hints(stamped)
            if text:
                await self.backend.append_text(segment_key(self.clock()), text)


@dataclass
class HintReader:
    """The reading side of one replica: each poll returns the hints written since the last one."""

    backend: MemoryBackend
    clock: Clock = utc_now
    _consumed: dict[str, int] = field(default_factory=dict)  # segment key -> characters taken

    async def poll(self) -> list[Hint] | None:
        """New hints, newest segment last; None when a segment could not be read (then nothing is
        marked consumed, and the next poll returns those hints again)."""
        now = self.clock()
        keys = [segment_key(now - SEGMENT), segment_key(now)]
        found: list[Hint] = []
        consumed = dict(self._consumed)
        for key in keys:
            try:
                text = await self.backend.read_text(key)
            except StorageError as exc:
                log.warning(
                    "hint segment unreadable", extra={"key": key, "error": type(exc).__name__}
                )
                return None
            if text is None:
                continue
            start = consumed.get(key, 0)
            # Only whole lines: an append in flight never shows half a line, but a reader must not
            # depend on it.
            end = text.rfind("\n", start) + 1
            if end <= start:
                continue
            found.extend(
                h
                for line in text[start:end].splitlines()
                if (h := parse_hint_line(line)) is not None
            )
            consumed[key] = end
        self._consumed = {k: v for k, v in consumed.items() if k in keys}
        return found


@dataclass
class HintFeed:
    """One replica's hints shared among its kinds of conversation: each kind's poll takes its own
    (``view``), and a read of the segments serves every kind. A kind that finds hints another kind's
    read left for it takes them without reading; one that finds none reads, for all. With the kinds'
    loops alternating, the segments are read about once per poll interval, not once per kind."""

    reader: HintReader
    _waiting: dict[str | None, list[Hint]] = field(default_factory=dict)
    _rounds: int = 0  # reads of the segments so far
    _taken_at: dict[str | None, int] = field(default_factory=dict)  # kind -> rounds it has taken

    def view(self, tag: str | None) -> KindHints:
        self._waiting.setdefault(tag, [])
        self._taken_at.setdefault(tag, self._rounds)
        return KindHints(self, tag)

    async def _take(self, tag: str | None) -> list[Hint] | None:
        if self._taken_at[tag] == self._rounds:  # no read since this kind last took: read for all
            hints = await self.reader.poll()
            if hints is None:
                return None
            self._rounds += 1
            for hint in hints:
                # A kind no poll here watches (a newer version's, or one this replica does not
                # run) is left to the replicas that do.
                if hint.kind in self._waiting:
                    self._waiting[hint.kind].append(hint)
        self._taken_at[tag] = self._rounds
        taken, self._waiting[tag] = self._waiting[tag], []
        return taken


@dataclass(frozen=True)
class KindHints:
    """The hints of one kind of conversation (its ``hint_tag``), taken from the replica's feed."""

    feed: HintFeed
    tag: str | None

    async def poll(self) -> list[Hint] | None:
        """New hints of this kind; None when the segments could not be read."""
        return await self.feed._take(self.tag)

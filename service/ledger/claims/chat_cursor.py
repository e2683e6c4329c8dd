"""The chat cursor and the pure rules over it: parse, render, merge, decide what is claimable.

A cursor is stored under its kind's prefix (``chat_cursors/<url-quoted chat id>.json`` for a chat; see
service.domain.conversation) in the single-host format, with three fields added (readers that do not know them ignore them)::

    {"last_ts": "2026-11-29T10:00:00.123Z",     # the fleet's watermark for this chat
     "seen_ids_tail": ["1764410400123", ...],   # the newest 50 recorded ids, oldest first
     "bootstrapped": true,
     "last_written_at": "2026-11-29T10:00:01Z",
     "last_ts_ids": ["1764410400123"],          # every recorded id whose time equals last_ts
     "claims": [{"token": "9f…", "at": "…"}],   # the last 32 claim ids, newest first
     "any_age_id": "1764410400123"}             # only for a chat create_chat made (below)

What counts as already claimed. A candidate ``(id, ts)`` is claimable when

* its id is not recorded (not in ``seen_ids_tail``, not in ``last_ts_ids``), and
* ``last_ts`` is null, or ``ts > last_ts``, or ``ts == last_ts``.

A candidate older than ``last_ts`` and not in the tail is never claimable: it was either claimed and
pushed out of the 50-id tail by a larger burst, or it surfaced in Graph behind a watermark the fleet
already passed; replaying it could act on a message twice or late, so it is decided as "behind".
Equal timestamps are the delicate case: two messages in the same millisecond can reach two
replicas at different times. ``last_ts_ids`` records every claimed id at exactly ``last_ts`` (it is
tiny: it resets whenever the watermark moves), so a same-millisecond message nobody claimed stays
claimable even after a burst of more than 50 pushed the tail past it. A cursor written by the
single-host system has no ``last_ts_ids``; there the tail alone guards equal timestamps, which fails
only if more than 50 claimed messages share the newest millisecond.

Order. Teams message ids are epoch-millisecond strings, so when every id is numeric the tail is
ordered numerically. Otherwise the stored order is kept and new ids are appended in time order;
that fallback is not order-independent (two merges in different orders may keep different tails).

Merge. ``merge`` is the join of two cursors: the later ``last_ts``, the union of ids bounded to the
newest 50, the ``last_ts_ids`` of whichever side holds the later watermark, the newest 32 claim
marks. It is commutative, associative and idempotent (for numeric ids), which is what lets any
replica's write be re-applied on top of whatever another replica wrote.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from service.clock import as_utc, later
from service.ledger.records.fields import (
    ExtraFields,
    extra_fields,
    load_object,
    merge_extra,
    optional_str,
    optional_timestamp,
    require_str,
    require_timestamp,
    str_list,
    timestamp_text,
    with_extra,
)
from service.ledger.records.reads import CorruptValueError

TAIL_SIZE = 50
MAX_TAIL = 1000  # ids kept ahead of a stalled watermark, at most
CLAIM_MARKS_KEPT = 32
_KNOWN_FIELDS = (
    "last_ts",
    "seen_ids_tail",
    "bootstrapped",
    "last_written_at",
    "last_ts_ids",
    "claims",
    "any_age_id",
)
_WHAT = "chat cursor"


@dataclass(frozen=True, slots=True)
class Candidate:
    """A message a replica would like to deliver: its Graph id and creation time."""

    id: str
    ts: datetime

    def __post_init__(self) -> None:
        object.__setattr__(self, "ts", as_utc(self.ts))

    @property
    def candidate(self) -> Candidate:
        """A bare candidate is its own offer (``chat_claim_types.Offer``): the ledger's tests claim these."""
        return self


@dataclass(frozen=True, slots=True)
class ClaimMark:
    """The id of one claim write, recorded in the cursor so an uncertain write can find itself."""

    token: str
    at: datetime


def id_order_key(message_id: str) -> tuple[int, str]:
    return (int(message_id), message_id)


def _all_numeric(ids: Iterable[str]) -> bool:
    return all(i.isascii() and i.isdigit() for i in ids)


def newest_tail(
    older: Sequence[str],
    newer: Sequence[str],
    size: int = TAIL_SIZE,
    *,
    watermark: datetime | None = None,
) -> tuple[str, ...]:
    """The newest ``size`` ids of both sequences (numeric order, or stored order then new ones).

    With numeric (Teams) ids, every id created after ``watermark`` is kept too, up to MAX_TAIL: an
    id claimed ahead of the watermark (a sponsor's reply behind a message some other replica must
    deliver) is protected by the tail alone, and dropping it would make it claimable again.
    """
    union = list(dict.fromkeys([*older, *newer]))
    if not _all_numeric(union):
        return tuple(union[-size:])
    union.sort(key=id_order_key)
    keep = size
    if watermark is not None:
        # Teams ids are creation times in epoch milliseconds (never earlier than the creation time);
        # ids at exactly the watermark are guarded by last_ts_ids.
        floor = int(as_utc(watermark).timestamp() * 1000)
        ahead = sum(1 for i in union if int(i) > floor)
        keep = min(max(size, ahead), MAX_TAIL)
    return tuple(union[-keep:])


@dataclass(frozen=True)
class ChatCursor:
    last_ts: datetime | None = None
    seen_ids_tail: tuple[str, ...] = ()
    bootstrapped: bool = False
    last_written_at: datetime | None = None
    last_ts_ids: frozenset[str] = frozenset()
    claims: tuple[ClaimMark, ...] = ()  # newest first
    # create_chat's newest message: the age bound on delivery spares it (``created_chat_cursor``).
    any_age_id: str | None = None
    extra: ExtraFields = field(default=(), repr=False)

    def is_recorded(self, message_id: str) -> bool:
        return message_id in self.last_ts_ids or message_id in self.seen_ids_tail

    def has_claim(self, claim_id: str) -> bool:
        return any(mark.token == claim_id for mark in self.claims)


# --- text ---


def _parse_claims(obj: dict[str, Any]) -> tuple[ClaimMark, ...]:
    raw = obj.get("claims", [])
    if not isinstance(raw, list) or not all(isinstance(item, dict) for item in raw):
        raise CorruptValueError(f"{_WHAT}: field 'claims' must be a list of objects")
    return tuple(
        ClaimMark(require_str(m, "token", _WHAT), require_timestamp(m, "at", _WHAT)) for m in raw
    )


def parse_chat_cursor(text: str) -> ChatCursor:
    """The cursor in ``text``; CorruptValueError for anything but a well-shaped cursor object."""
    obj = load_object(text, _WHAT)
    for required in ("last_ts", "seen_ids_tail"):
        if required not in obj:
            raise CorruptValueError(f"{_WHAT}: field {required!r} is missing")
    bootstrapped = obj.get("bootstrapped", False)
    if not isinstance(bootstrapped, bool):
        raise CorruptValueError(f"{_WHAT}: field 'bootstrapped' must be true or false")
    last_ts = optional_timestamp(obj, "last_ts", _WHAT)
    last_ts_ids = frozenset(str_list(obj, "last_ts_ids", _WHAT))
    if last_ts is None and last_ts_ids:
        raise CorruptValueError(f"{_WHAT}: 'last_ts_ids' without a 'last_ts'")
    return ChatCursor(
        last_ts=last_ts,
        seen_ids_tail=tuple(str_list(obj, "seen_ids_tail", _WHAT, required=True)),
        bootstrapped=bootstrapped,
        last_written_at=optional_timestamp(obj, "last_written_at", _WHAT),
        last_ts_ids=last_ts_ids,
        claims=_parse_claims(obj),
        any_age_id=optional_str(obj, "any_age_id", _WHAT),
        extra=extra_fields(obj, _KNOWN_FIELDS),
    )


def render_chat_cursor(cursor: ChatCursor) -> str:
    obj: dict[str, Any] = {
        "last_ts": timestamp_text(cursor.last_ts),
        "seen_ids_tail": list(cursor.seen_ids_tail),
        "bootstrapped": cursor.bootstrapped,
        "last_written_at": timestamp_text(cursor.last_written_at),
        "last_ts_ids": sorted(cursor.last_ts_ids, key=_ids_sort_key(cursor.last_ts_ids)),
        "claims": [{"token": m.token, "at": timestamp_text(m.at)} for m in cursor.claims],
    }
    if cursor.any_age_id is not None:  # written only where it means something: one chat in many
        obj["any_age_id"] = cursor.any_age_id
    return json.dumps(with_extra(obj, cursor.extra))


def _ids_sort_key(ids: Iterable[str]) -> Callable[[str], tuple[int, str]] | Callable[[str], str]:
    return id_order_key if _all_numeric(ids) else str


# --- merge ---


def _newest_marks(marks: Iterable[ClaimMark]) -> tuple[ClaimMark, ...]:
    unique = {m.token: m for m in sorted(marks, key=lambda m: (m.at, m.token))}
    ordered = sorted(unique.values(), key=lambda m: (m.at, m.token), reverse=True)
    return tuple(ordered[:CLAIM_MARKS_KEPT])


def merge(a: ChatCursor, b: ChatCursor) -> ChatCursor:
    """The join of two cursors (see the module docstring)."""
    last_ts = later(a.last_ts, b.last_ts)
    at_last = frozenset().union(*(c.last_ts_ids for c in (a, b) if c.last_ts == last_ts))
    return ChatCursor(
        last_ts=last_ts,
        seen_ids_tail=newest_tail(a.seen_ids_tail, b.seen_ids_tail, watermark=last_ts),
        bootstrapped=a.bootstrapped or b.bootstrapped,
        last_written_at=later(a.last_written_at, b.last_written_at),
        last_ts_ids=at_last,
        claims=_newest_marks((*a.claims, *b.claims)),
        any_age_id=max((i for i in (a.any_age_id, b.any_age_id) if i is not None), default=None),
        extra=merge_extra(a.extra, b.extra),
    )


# --- decide ---


@dataclass(frozen=True)
class ClaimDecision:
    """Every distinct candidate lands in exactly one of the three groups."""

    claimable: tuple[Candidate, ...]  # oldest first
    recorded: tuple[str, ...]  # already in the ledger: someone claimed them
    behind: tuple[str, ...]  # older than the fleet's watermark and not in the tail: never claimable


def message_order(candidates: Iterable[Candidate]) -> list[Candidate]:
    """Distinct candidates (first occurrence of an id wins), oldest first; ties by numeric id."""
    unique = list({c.id: c for c in reversed(list(candidates))}.values())
    numeric = _all_numeric(c.id for c in unique)
    return sorted(unique, key=lambda c: (c.ts, id_order_key(c.id) if numeric else (0, c.id)))


def decide_claim(cursor: ChatCursor | None, candidates: Iterable[Candidate]) -> ClaimDecision:
    """Which candidates are still claimable against ``cursor`` (None: the chat has no cursor yet)."""
    current = cursor if cursor is not None else ChatCursor()
    claimable: list[Candidate] = []
    recorded: list[str] = []
    behind: list[str] = []
    for candidate in message_order(candidates):
        if current.is_recorded(candidate.id):
            recorded.append(candidate.id)
        elif current.last_ts is None or candidate.ts >= current.last_ts:
            claimable.append(candidate)
        else:
            behind.append(candidate.id)
    return ClaimDecision(tuple(claimable), tuple(recorded), tuple(behind))


def claim_contribution(
    claimable: Sequence[Candidate],
    *,
    claim_id: str,
    at: datetime,
    seen_up_to: datetime | None = None,
    advance: bool = True,
) -> ChatCursor:
    """What one claim adds to the ledger: its ids, its watermark and its claim mark.

    ``advance=False`` claims ahead of the watermark: it records the ids but moves the watermark only
    to ``seen_up_to``, so older messages nobody has claimed stay claimable.
    """
    if not claimable:
        raise ValueError("a claim needs at least one candidate")
    ordered = message_order(claimable)
    seen = as_utc(seen_up_to) if seen_up_to is not None else None
    last_ts = later(ordered[-1].ts, seen) if advance else seen
    return ChatCursor(
        last_ts=last_ts,
        seen_ids_tail=tuple(c.id for c in ordered),
        bootstrapped=True,
        last_written_at=as_utc(at),
        last_ts_ids=frozenset(c.id for c in ordered if c.ts == last_ts),
        claims=(ClaimMark(claim_id, as_utc(at)),),
    )


def apply_claim(
    cursor: ChatCursor | None,
    claimable: Sequence[Candidate],
    *,
    claim_id: str,
    now: datetime,
    seen_up_to: datetime | None = None,
    advance: bool = True,
) -> ChatCursor:
    """``cursor`` with the claim merged in; our claim mark is always the newest one it keeps.

    Marks are ordered by time, so a replica whose clock lags could see its own mark evicted at
    once and later mistake its committed claim for a lost one; stamping the mark just after the
    newest stored one keeps it (until 32 newer claims follow).
    """
    current = cursor if cursor is not None else ChatCursor()
    at = as_utc(now)
    if current.claims:
        at = max(at, max(m.at for m in current.claims) + timedelta(microseconds=1))
    return merge(
        current,
        claim_contribution(
            claimable, claim_id=claim_id, at=at, seen_up_to=seen_up_to, advance=advance
        ),
    )


# Graph's message times have millisecond precision, so nothing is created strictly between a
# message's time and one microsecond before it.
JUST_BEFORE = timedelta(microseconds=1)


def created_chat_cursor(newest: Candidate | None, *, now: datetime) -> ChatCursor:
    """A chat the agent made with ``create_chat``: its newest message surfaces whatever its age, nothing
    older does.

    The rule is recorded in the ordinary fields, so every reader honours it without knowing it (older
    replicas and the single-host system included; a flag they ignored would let them replay history
    or drop the message): the watermark sits just before the newest message, which is left out of the
    tail. By ``decide_claim`` the newest is then claimable, every older message is behind, and every
    later one is new. An empty chat gets no watermark, so its first message is new. ``any_age_id``
    names the newest, so the age bound on delivery (which replicas of this version apply when they
    read a chat) spares it; replicas that do not know the field keep it and surface it anyway.
    """
    return ChatCursor(
        last_ts=newest.ts - JUST_BEFORE if newest is not None else None,
        bootstrapped=True,
        last_written_at=as_utc(now),
        any_age_id=newest.id if newest is not None else None,
    )


def first_watch_cursor(
    newest: Candidate | None, *, now: datetime, surface_newest: bool
) -> ChatCursor:
    """A chat the fleet starts watching, host or no host: what it held up to its newest message is
    history, never delivered; everything after is new. ``surface_newest`` (a fresh newest message)
    leaves that one claimable too, as ``created_chat_cursor`` does, but under the age bound. ``newest``
    None: the chat is known to be empty, so its first message is new."""
    if newest is None or not surface_newest:
        return baseline_cursor([newest] if newest is not None else [], now=now)
    return ChatCursor(
        last_ts=newest.ts - JUST_BEFORE, bootstrapped=True, last_written_at=as_utc(now)
    )


def baseline_cursor(seen: Sequence[Candidate], *, now: datetime) -> ChatCursor:
    """First sight without a delivery: everything up to the newest seen message counts as seen."""
    ordered = message_order(seen)
    last_ts = ordered[-1].ts if ordered else None
    return ChatCursor(
        last_ts=last_ts,
        seen_ids_tail=tuple(c.id for c in ordered)[-TAIL_SIZE:],
        bootstrapped=True,
        last_written_at=as_utc(now),
        last_ts_ids=frozenset(c.id for c in ordered if c.ts == last_ts),
    )

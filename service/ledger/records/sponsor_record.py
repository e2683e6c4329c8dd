"""The fleet's sponsor list: one shared record, so the fleet reads Graph's sponsors once per interval.

Key ``fleet/sponsors.json``: ``{"agent_identity_id", "sponsors": [{object_id, upn, mail, display_name}],
"read_at", "claim": {"holder", "claimed_at"} | null}``. ``sponsors`` and ``read_at`` are the last list a
replica read from Graph (references already resolved to users); ``claim`` names the replica reading it
again right now. A record that does not parse, or names another agent identity, holds no sponsors for us:
it is never adopted, and a claim may be written over it at once (with If-Match on its ETag).

How old a list (or a claim) is, is the larger of two measures, so clock skew between replicas can only make
it look older: the writer's wall-clock stamp against ours, and how long this replica has watched the same
stamp stand on its own monotonic clock (the lease records' rule: a value nobody changed in a whole
interval is due, whatever the clocks say). ``decide`` is the pure rule; the shell is
``service.delivery.shared_sponsors``.

A claim over a record that holds no list (a fresh fleet's first read) is waited for only
``CLAIM_PATIENCE_S``, not an interval: meanwhile the waiting replicas have no sponsor at all, so a holder
that died or hangs mid-read must not leave the fleet without one for a whole interval. A claim over a
list (due, but still within the stale bound) is waited for an interval, as the others keep that list.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any

from service.clock import format_timestamp
from service.domain.sponsors import Sponsor
from service.ledger.records.fields import (
    load_object,
    optional_str,
    require_str,
    require_timestamp,
)
from service.ledger.records.reads import CorruptValueError

KEY = "fleet/sponsors.json"
# How long a claim over a record holding no list is waited for: a Graph sponsor read (the list and its
# references resolved) takes well under a second; this leaves room for a retried request or two.
CLAIM_PATIENCE_S = 5.0
_WHAT = "sponsor record"


@dataclass(frozen=True, slots=True)
class SponsorClaim:
    holder: str  # the replica reading Graph's list now
    claimed_at: datetime


@dataclass(frozen=True, slots=True)
class SponsorRecord:
    """The stored record; ``sponsors`` is None when it holds no list we may adopt (none yet, or unreadable)."""

    agent_identity_id: str | None = None
    sponsors: tuple[Sponsor, ...] | None = None
    read_at: datetime | None = None
    claim: SponsorClaim | None = None


def render_record(record: SponsorRecord) -> str:
    sponsors = record.sponsors or ()
    return json.dumps(
        {
            "agent_identity_id": record.agent_identity_id,
            "sponsors": [
                {
                    "object_id": s.object_id,
                    "upn": s.user_principal_name,
                    "mail": s.mail,
                    "display_name": s.display_name,
                }
                for s in sponsors
            ],
            "read_at": format_timestamp(record.read_at) if record.read_at else None,
            "claim": None
            if record.claim is None
            else {
                "holder": record.claim.holder,
                "claimed_at": format_timestamp(record.claim.claimed_at),
            },
        },
        sort_keys=True,
    )


def parse_record(text: str, agent_identity_id: str) -> SponsorRecord:
    """Never raises: a record that cannot be read, or is another identity's, holds no list for us."""
    try:
        obj = load_object(text, _WHAT)
        if obj.get("agent_identity_id") != agent_identity_id:
            raise CorruptValueError(f"{_WHAT}: it names another agent identity")
        claim = _claim(obj.get("claim"))
        if obj.get("read_at") is None:
            return SponsorRecord(agent_identity_id, claim=claim)
        sponsors = tuple(_sponsor(item) for item in _items(obj.get("sponsors")))
        return SponsorRecord(
            agent_identity_id, sponsors, require_timestamp(obj, "read_at", _WHAT), claim
        )
    except (CorruptValueError, ValueError, TypeError):
        return SponsorRecord()


def _items(value: object) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(i, dict) for i in value):
        raise CorruptValueError(f"{_WHAT}: 'sponsors' must be a list of objects")
    return value


def _sponsor(item: dict[str, Any]) -> Sponsor:
    return Sponsor(
        require_str(item, "object_id", _WHAT),
        optional_str(item, "upn", _WHAT),
        optional_str(item, "mail", _WHAT),
        optional_str(item, "display_name", _WHAT),
    )


def _claim(value: object) -> SponsorClaim | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise CorruptValueError(f"{_WHAT}: 'claim' must be an object or null")
    return SponsorClaim(
        require_str(value, "holder", _WHAT), require_timestamp(value, "claimed_at", _WHAT)
    )


@dataclass
class StampWatch:
    """When this replica first saw each stamp (a list's read_at, a claim), on its monotonic clock."""

    first_seen: dict[object, float] = field(default_factory=dict)

    def wrote_list(self, read_at: datetime, monotonic: float) -> None:
        """This replica wrote a list stamped ``read_at``: it has stood since now."""
        self.first_seen.setdefault(_list_key(read_at), monotonic)

    def age_s(self, stamp: datetime, key: object, *, now: datetime, monotonic: float) -> float:
        seen = self.first_seen.setdefault(key, monotonic)
        if len(self.first_seen) > 16:  # only the latest few stamps matter
            for old in list(self.first_seen)[:-8]:
                self.first_seen.pop(old, None)
        return max((now - stamp).total_seconds(), monotonic - seen, 0.0)


def _list_key(read_at: datetime) -> object:
    return ("list", read_at)


class Step(str, Enum):
    ADOPT = "adopt"  # the record's list is younger than the interval: take it, no Graph
    WAIT = "wait"  # due (or absent), but another replica's claim is live: no Graph
    CLAIM = "claim"  # due and unclaimed (or the claim is ours or abandoned): claim, then read Graph


@dataclass(frozen=True, slots=True)
class Decision:
    step: Step
    list_age_s: float | None  # how old the record's list is (None: it holds none we may adopt)


def decide(
    record: SponsorRecord | None,
    *,
    me: str,
    interval_s: float,
    now: datetime,
    monotonic: float,
    watch: StampWatch,
    patience_s: float = CLAIM_PATIENCE_S,
) -> Decision:
    """What this replica does with the record it read (None: there is none).

    Another replica's claim is live for an interval over a list (the others keep it meanwhile), but
    only ``patience_s`` over no list (the others have no sponsor meanwhile)."""
    age = None
    if record is not None and record.sponsors is not None and record.read_at is not None:
        age = watch.age_s(record.read_at, _list_key(record.read_at), now=now, monotonic=monotonic)
        if age < interval_s:
            return Decision(Step.ADOPT, age)
    claim = record.claim if record is not None else None
    if claim is not None and claim.holder != me:
        key = ("claim", claim.holder, claim.claimed_at)
        lapses_after = interval_s if age is not None else min(patience_s, interval_s)
        if watch.age_s(claim.claimed_at, key, now=now, monotonic=monotonic) < lapses_after:
            return Decision(Step.WAIT, age)
    return Decision(Step.CLAIM, age)

"""The record that makes a day's summary once per fleet: ``summaries/<day>.json``, its states and their rules.

==========  ====================================================  ===========================================
state       what the owner has done                               a replica finding it stale (lease passed)
==========  ====================================================  ===========================================
claimed     claimed the day (if_absent): counts, send id          takes it over (If-Match), keeps the send id
mailing     may be sending the sponsors' mail now                 takes it over, looks in Sent Items for the
                                                                  send id first, sends only if it is not there
mailed      the mail is in Graph (final)                          nothing: the day is finished
done        finished, nothing to mail (final; older records too)  nothing
==========  ====================================================  ===========================================

``mailing`` is the fence: an owner sends only after its own If-Match move from ``claimed`` to
``mailing`` landed, and a takeover is an If-Match write too, so exactly one of them wins. A stale
``claimed`` therefore never sent anything; a stale ``mailing`` may have, which is why its taker looks
in Sent Items before sending. Staleness counts from the last move (``state_at``), so an owner that
moved to ``mailing`` has the whole lease for the send and its settlement, which are bounded far below it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from enum import Enum
from typing import Any

from service.clock import as_utc
from service.ledger.records.fields import (
    ExtraFields,
    extra_fields,
    load_object,
    optional_str,
    optional_timestamp,
    require_str,
    require_timestamp,
    str_list,
    timestamp_text,
    with_extra,
)
from service.ledger.records.reads import CorruptValueError

SUMMARIES_PREFIX = "summaries/"
_KNOWN = (
    "day",
    "state",
    "owner",
    "claimed_at",
    "completed_at",
    "counts",
    "send_id",
    "state_at",
    "recipients",
    "subject",
    "mailed_at",
    "mail_outcome",
    "sent_item_id",
)
_WHAT = "summary claim"


class SummaryState(str, Enum):
    CLAIMED = "claimed"
    MAILING = "mailing"
    MAILED = "mailed"
    DONE = "done"


FINISHED = frozenset({SummaryState.MAILED, SummaryState.DONE})


def summary_keys(day: date) -> tuple[str, str]:
    """(JSON claim key, HTML key) for ``day``."""
    stem = f"{SUMMARIES_PREFIX}{day.isoformat()}"
    return f"{stem}.json", f"{stem}.html"


@dataclass(frozen=True)
class SummaryClaim:
    day: str
    state: SummaryState
    owner: str
    claimed_at: datetime
    completed_at: datetime | None = None
    counts: dict[str, Any] = field(default_factory=dict, compare=False)
    send_id: str | None = None  # the mail's x-entrabot-send-id, the same whoever sends it
    state_at: datetime | None = (
        None  # when the state last moved; a record without it counts from claimed_at
    )
    recipients: tuple[str, ...] = ()  # whom the mail goes to, fixed when moving to mailing
    subject: str | None = None
    mailed_at: datetime | None = None
    mail_outcome: str | None = None  # how the mail was known to be in Graph
    sent_item_id: str | None = None
    extra: ExtraFields = field(default=(), repr=False)

    def has_claim(self, claim_id: str) -> bool:
        return self.owner == claim_id

    @property
    def finished(self) -> bool:
        return self.state in FINISHED

    def moved_at(self) -> datetime:
        return self.state_at or self.claimed_at

    def is_stale(self, now: datetime, lease: timedelta) -> bool:
        return not self.finished and as_utc(now) - self.moved_at() >= lease


class Step(str, Enum):
    """What a replica does about a day, given its claim record (None: not claimed yet)."""

    CLAIM = "claim"  # nobody claimed it: create the claim
    TAKE_OVER = "take_over"  # the owner went quiet for a lease: take its claim over
    WAIT = "wait"  # an owner is at work
    FINISHED = "finished"


def next_step(existing: SummaryClaim | None, now: datetime, lease: timedelta) -> Step:
    if existing is None:
        return Step.CLAIM
    if existing.finished:
        return Step.FINISHED
    return Step.TAKE_OVER if existing.is_stale(now, lease) else Step.WAIT


def parse_summary_claim(text: str) -> SummaryClaim:
    obj = load_object(text, _WHAT)
    state = obj.get("state")
    if state not in {s.value for s in SummaryState}:
        raise CorruptValueError(
            f"{_WHAT}: field 'state' must be one of {[s.value for s in SummaryState]}"
        )
    counts = obj.get("counts", {})
    if not isinstance(counts, dict):
        raise CorruptValueError(f"{_WHAT}: field 'counts' must be an object")
    return SummaryClaim(
        day=require_str(obj, "day", _WHAT),
        state=SummaryState(state),
        owner=require_str(obj, "owner", _WHAT),
        claimed_at=require_timestamp(obj, "claimed_at", _WHAT),
        completed_at=optional_timestamp(obj, "completed_at", _WHAT),
        counts=counts,
        send_id=optional_str(obj, "send_id", _WHAT),
        state_at=optional_timestamp(obj, "state_at", _WHAT),
        recipients=tuple(str_list(obj, "recipients", _WHAT)),
        subject=optional_str(obj, "subject", _WHAT),
        mailed_at=optional_timestamp(obj, "mailed_at", _WHAT),
        mail_outcome=optional_str(obj, "mail_outcome", _WHAT),
        sent_item_id=optional_str(obj, "sent_item_id", _WHAT),
        extra=extra_fields(obj, _KNOWN),
    )


def render_summary_claim(claim: SummaryClaim) -> str:
    obj: dict[str, Any] = {
        "day": claim.day,
        "state": claim.state.value,
        "owner": claim.owner,
        "claimed_at": timestamp_text(claim.claimed_at),
        "completed_at": timestamp_text(claim.completed_at),
        "counts": claim.counts,
        "send_id": claim.send_id,
        "state_at": timestamp_text(claim.state_at),
        "recipients": list(claim.recipients),
        "subject": claim.subject,
        "mailed_at": timestamp_text(claim.mailed_at),
        "mail_outcome": claim.mail_outcome,
        "sent_item_id": claim.sent_item_id,
    }
    return json.dumps(with_extra(obj, claim.extra), sort_keys=False)

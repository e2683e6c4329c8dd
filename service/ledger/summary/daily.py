"""The daily summary: which day is due, what it counts, how it is triaged and renders. Pure functions only.

The day. A summary is produced at 17:00 at the fixed offset UTC−7 (no daylight saving), for the 24
hours that end then: the summary keyed ``D`` covers [D−1 17:00, D 17:00) at UTC−7, which is exactly
the UTC calendar day D, [D 00:00Z, D+1 00:00Z) — so it reads one interaction file,
``interactions/D.jsonl``. It is due from 17:00 UTC−7 (00:00Z) for ``CATCH_UP`` (12 hours): a
fleet that comes up late that evening still produces it, one that was down all night skips it
rather than sending yesterday's summary mid-morning.

The triage (``service.ledger.summary.triage``), from the day's records and the promises ledger; the
sponsors get it by mail (``service.ledger.summary.production``):

* **Needs you** — what only a person can settle. A send whose outcome nobody could settle
  (``send_unconfirmed``: it may or may not be in the chat or in Sent Items, and re-sending could make two);
  an open promise past its due time (the agent's own text, its id and whom it was made to).
* **Handled** — what the agent did. How many messages reached it (chats and mails); its own actions by
  kind (sent, replied, forwarded, edited, deleted, members added, permission requests asked and verdicts
  relayed, summaries mailed); promises resolved that day.
* **Heads-up** — worth a look, nothing to do yet. Open promises due within 24 hours of the day's end, open
  promises without a due time; chats whose latest messages came after the agent last wrote there (the id and
  how many); permission requests that got no sponsor's verdict; lines of the log that could not be read.

Every line is built from ids, counts, times and the agent's own promise texts: never a body, subject or
name someone else wrote, since the summary leaves the fleet as mail. A rule lists at most ten lines and
counts the rest.
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta, timezone

from service.clock import as_utc
from service.ledger.memory.interactions import Direction, Interaction
from service.ledger.memory.promises import Promise, PromiseStatus
from service.ledger.summary.triage import Section, Triage, triage

SUMMARY_OFFSET = timezone(timedelta(hours=-7))
SUMMARY_HOUR = 17
CATCH_UP = timedelta(hours=12)


def day_window(day: date) -> tuple[datetime, datetime]:
    """[start, end) in UTC of the summary keyed ``day``."""
    end = datetime.combine(day, time(SUMMARY_HOUR), tzinfo=SUMMARY_OFFSET).astimezone(timezone.utc)
    return end - timedelta(days=1), end


def summary_due(now: datetime, *, catch_up: timedelta = CATCH_UP) -> date | None:
    """The day whose summary is due at ``now``, or None outside the catch-up window after 17:00 UTC−7."""
    local = as_utc(now).astimezone(SUMMARY_OFFSET)
    day = local.date() if local.hour >= SUMMARY_HOUR else local.date() - timedelta(days=1)
    _, end = day_window(day)
    return day if as_utc(now) - end < catch_up else None


def _counts(values: Iterable[str | None]) -> dict[str, int]:
    counted = Counter(value or "unknown" for value in values)
    return dict(sorted(counted.items(), key=lambda item: (-item[1], item[0])))


@dataclass(frozen=True)
class Summary:
    day: date
    total: int = 0
    by_direction: Mapping[str, int] = field(default_factory=dict)
    by_channel: Mapping[str, int] = field(default_factory=dict)
    by_action: Mapping[str, int] = field(default_factory=dict)
    by_chat: Mapping[str, int] = field(default_factory=dict)
    by_sender: Mapping[str, int] = field(default_factory=dict)
    promises_made: int = 0
    promises_resolved: int = 0
    promises_open: int = 0
    triage: Triage = field(default_factory=Triage)

    def counts(self) -> dict[str, object]:
        """The JSON-ready counts stored in ``summaries/<day>.json``."""
        return {
            "day": self.day.isoformat(),
            "total": self.total,
            "by_direction": dict(self.by_direction),
            "by_channel": dict(self.by_channel),
            "by_action": dict(self.by_action),
            "by_chat": dict(self.by_chat),
            "by_sender": dict(self.by_sender),
            "promises_made": self.promises_made,
            "promises_resolved": self.promises_resolved,
            "promises_open": self.promises_open,
            "triage": self.triage.to_json(),
        }


def build_summary(
    day: date,
    records: Iterable[Interaction],
    promises: Iterable[Promise] = (),
    *,
    skipped_lines: int = 0,
) -> Summary:
    """Counts of the day's interactions (only those inside its window) and of promises made/resolved in it,
    and their triage; ``skipped_lines`` are the day's log lines that could not be read."""
    start, end = day_window(day)
    inside = [r for r in records if start <= r.ts < end]
    promise_list = list(promises)
    return Summary(
        day=day,
        total=len(inside),
        by_direction=_counts(r.direction.value for r in inside),
        by_channel=_counts(r.channel.value for r in inside),
        by_action=_counts(r.action for r in inside),
        by_chat=_counts(r.chat_id for r in inside),
        by_sender=_counts(r.sender for r in inside if r.direction is Direction.IN),
        promises_made=sum(1 for p in promise_list if start <= p.created_at < end),
        promises_resolved=sum(
            1 for p in promise_list if p.resolved_at is not None and start <= p.resolved_at < end
        ),
        promises_open=sum(
            1 for p in promise_list if p.status is PromiseStatus.OPEN and p.created_at < end
        ),
        triage=triage(inside, promise_list, start=start, end=end, skipped_lines=skipped_lines),
    )


def _table(title: str, counts: Mapping[str, int]) -> str:
    if not counts:
        return f"<h2>{html.escape(title)}</h2>\n<p>none</p>\n"
    rows = "".join(
        f"<tr><td>{html.escape(name)}</td><td>{count}</td></tr>\n" for name, count in counts.items()
    )
    return f"<h2>{html.escape(title)}</h2>\n<table>\n{rows}</table>\n"


_SECTION_TITLES = {
    Section.NEEDS_YOU: "Needs you",
    Section.HANDLED: "Handled",
    Section.HEADS_UP: "Heads-up",
}


def _section(summary: Summary, section: Section) -> str:
    items = summary.triage.of(section)
    title = html.escape(_SECTION_TITLES[section])
    if not items:
        return f"<h2>{title}</h2>\n<p>nothing</p>\n"
    lines = "".join(f"<li>{html.escape(item.text)}</li>\n" for item in items)
    return f"<h2>{title}</h2>\n<ul>\n{lines}</ul>\n"


def render_html(summary: Summary) -> str:
    """A self-contained HTML page (the sponsors' mail too): the triage, then the counts; every value escaped."""
    start, end = day_window(summary.day)
    day = html.escape(summary.day.isoformat())
    window = html.escape(
        f"{start.astimezone(SUMMARY_OFFSET):%Y-%m-%d %H:%M} to {end.astimezone(SUMMARY_OFFSET):%Y-%m-%d %H:%M} UTC-7"
    )
    triaged = "".join(_section(summary, section) for section in Section)
    sections = "".join(
        _table(title, counts)
        for title, counts in (
            ("By direction", summary.by_direction),
            ("By channel", summary.by_channel),
            ("By action", summary.by_action),
            ("By chat", summary.by_chat),
            ("By sender", summary.by_sender),
        )
    )
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>Daily summary {day}</title></head><body>\n"
        f"<h1>Daily summary {day}</h1>\n<p>{window}</p>\n{triaged}"
        f"<p>Interactions: {summary.total}</p>\n"
        f"<p>Promises made: {summary.promises_made}; resolved: {summary.promises_resolved}; "
        f"open: {summary.promises_open}</p>\n"
        f"{sections}</body></html>\n"
    )

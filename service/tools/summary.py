"""Producing a daily summary on demand: the same once-per-fleet claim as the scheduled run."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from pydantic import BaseModel, Field

from service.ledger.records.reads import ReadOutcome
from service.ledger.summary.daily import day_window
from service.ledger.summary.production import SummaryOutcome
from service.clock import as_utc, format_timestamp
from service.ledger.summary.daily import SUMMARY_HOUR, SUMMARY_OFFSET
from service.mcp.tool_registry import ToolCall, ToolError
from service.tools.deps import ToolDeps


def last_ended_day(now: datetime) -> date:
    """The summary day whose window ends at the most recent 17:00 UTC−7 at or before ``now``."""
    local = as_utc(now).astimezone(SUMMARY_OFFSET)
    return local.date() if local.hour >= SUMMARY_HOUR else local.date() - timedelta(days=1)


class RunSummaryInput(BaseModel):
    day: date | None = Field(
        default=None,
        description="The day to summarise (YYYY-MM-DD): it covers the 24 h ending 17:00 UTC-7 that day. "
        "Default: the day that ended at the last 17:00 UTC-7.",
    )


class RunSummaryResult(BaseModel):
    day: str
    window_start: str
    window_end: str
    outcome: SummaryOutcome = Field(
        description="produced, recovered, already_done, in_progress, unresolved, or "
        "before_first_boot (the day ended before this container first booted: no summary)"
    )
    counts: dict[str, Any] | None = Field(
        description="The stored counts and triage, once a replica has claimed the day"
    )
    state: str | None = Field(
        default=None,
        description="claimed, mailing, mailed (to the sponsors) or done (nothing to mail)",
    )
    mailed_to: list[str] = Field(
        default_factory=list, description="The sponsors it was (or is being) mailed to"
    )


@dataclass
class SummaryTools:
    deps: ToolDeps

    async def run_daily_summary(self, args: RunSummaryInput, call: ToolCall) -> RunSummaryResult:
        """Produce the daily summary of interactions and promises for a day that has ended, triaged into needs
        you / handled / heads-up, and mail it to the sponsors (once per fleet: if another replica already
        produced it, this reports that, its counts and whom it was mailed to)."""
        now = self.deps.clock()
        day = args.day or last_ended_day(now)
        start, end = day_window(day)
        if end > as_utc(now):
            raise ToolError(
                f"The day {day.isoformat()} has not ended yet: it ends at 17:00 UTC-7 "
                f"({format_timestamp(end)}), and a summary is produced once per day. Omit day for the "
                "last day that ended."
            )
        outcome = await self.deps.summary.produce(day)
        stored = await self.deps.summary.stored(day)
        claim = stored.value if stored.outcome is ReadOutcome.PRESENT else None
        return RunSummaryResult(
            day=day.isoformat(),
            window_start=format_timestamp(start),
            window_end=format_timestamp(end),
            outcome=outcome,
            counts=claim.counts if claim is not None else None,
            state=claim.state.value if claim is not None else None,
            mailed_to=list(claim.recipients) if claim is not None else [],
        )

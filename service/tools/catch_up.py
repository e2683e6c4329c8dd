"""Catching up: what the fleet delivered while the model may not have seen it (issue 22 item 4).

Claude Code drops channel events silently when its channel is not loaded (its channels reference: it
"doesn't acknowledge notifications"), and a session can end between a push and the model reading it.
Every delivery is in the interaction log (service.workers.recorder: which message, via which kind of
target, to which session), so an agent reads back what it may have missed here: since a cursor it was
given last time, or in the last hours; only what reached this session, or everything delivered to the
agent. Bodies come back enveloped, like every read tool's.

The cursor is the last record's time and message id, so paging never skips a record that shares its
second with the last one returned.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from pydantic import BaseModel, Field, field_validator

from service.clock import as_utc, format_timestamp, parse_timestamp
from service.ledger.memory.interactions import Direction, InteractionQuery
from service.ledger.memory.interactions import Action, Interaction, MAX_QUERY_DAYS
from service.mcp.tool_registry import ToolCall, ToolError
from service.tools.deps import ToolDeps
from service.tools.interactions import InteractionItem, extra_strings, interaction_item

MAX_LIMIT = 200
DELIVERY_ACTIONS = frozenset({Action.DELIVERED.value, Action.RECEIVED.value})


class CatchUpInput(BaseModel):
    cursor: str | None = Field(
        default=None,
        max_length=200,
        description="next_cursor from the previous catch_up; omitted: start `hours` back",
    )
    hours: float = Field(
        default=24.0,
        gt=0,
        le=MAX_QUERY_DAYS * 24,
        description="How far back to look when no cursor is given",
    )
    this_session_only: bool = Field(
        default=False, description="Only what was pushed to this session"
    )
    limit: int = Field(default=50, ge=1, le=MAX_LIMIT)

    @field_validator("cursor")
    @classmethod
    def _a_cursor_we_gave(cls, value: str | None) -> str | None:
        if value is not None:
            _parse_cursor(value)
        return value


class CatchUpResult(BaseModel):
    messages: list[InteractionItem] = Field(
        description="Oldest first; bodies inside <external_content> envelopes"
    )
    count: int
    next_cursor: str | None = Field(description="Pass it next time to read on from here")
    more: bool = Field(description="More deliveries follow: call again with next_cursor")
    unreadable_days: list[str] = Field(
        description="Days whose log could not be read: the answer is partial"
    )
    next_action: str = Field(serialization_alias="_next_action")


def _parse_cursor(cursor: str) -> tuple[datetime, str]:
    ts, sep, message_id = cursor.partition("|")
    try:
        moment = parse_timestamp(ts)
    except ValueError:
        moment = None
    if not sep or not message_id or moment is None:
        raise ValueError(
            "cursor is not one catch_up gave; pass its next_cursor unchanged, or omit it"
        )
    return as_utc(moment), message_id


def _cursor_of(record: Interaction) -> str:
    return f"{format_timestamp(record.ts)}|{record.message_id or ''}"


def _position(record: Interaction) -> tuple[datetime, str]:
    return record.ts, record.message_id or ""


@dataclass
class CatchUpTool:
    deps: ToolDeps

    async def catch_up(self, args: CatchUpInput, call: ToolCall) -> CatchUpResult:
        """List the Teams messages and mail the fleet delivered to the agent (or to this session) that you may
        have missed: since a cursor, or in the last hours. Act on each message_id once."""
        if args.this_session_only and call.session is None:
            raise ToolError(
                "this_session_only needs an MCP session, and this request has none (MCP 2026-07-28 has "
                "no sessions): call catch_up without it."
            )
        deps = self.deps
        after = _parse_cursor(args.cursor) if args.cursor is not None else None
        since = after[0] if after is not None else deps.clock() - timedelta(hours=args.hours)
        try:
            read = await deps.interactions.read(
                InteractionQuery(direction=Direction.IN, since=since)
            )
        except ValueError as exc:  # the span is too long
            raise ToolError(f"{exc}") from None
        target = f"push:{call.session_id}" if call.session_id else None
        chosen = [
            r
            for r in read.records
            if r.action in DELIVERY_ACTIONS
            and (after is None or _position(r) > after)
            and (not args.this_session_only or _target(r) == target)
        ]
        chosen.sort(key=_position)
        page = chosen[: args.limit]
        more = len(chosen) > len(page)
        next_cursor = _cursor_of(page[-1]) if page else args.cursor
        return CatchUpResult(
            messages=[interaction_item(r, with_body=True) for r in page],
            count=len(page),
            next_cursor=next_cursor,
            more=more,
            unreadable_days=[d.isoformat() for d in read.unresolved_days],
            next_action=(
                "More follow: call catch_up again with next_cursor."
                if more
                else "Up to date. Keep next_cursor for the next catch_up."
            ),
        )


def _target(record: Interaction) -> str | None:
    """The delivery target the recorder noted (push:<session id>), when it noted one."""
    return extra_strings(record).get("target")

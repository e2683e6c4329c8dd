"""The agent's promises (``promises.jsonl``, shared by the fleet): add one, list them, resolve one."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field

from service.ledger.memory.promises import Promise, PromiseStatus, PromiseWriteOutcome
from service.ledger.records.reads import ReadOutcome
from service.clock import as_utc, format_timestamp
from service.ledger.memory.promises import PromiseWrite
from service.mcp.tool_registry import ToolCall, ToolError
from service.tools.ids import ChatId
from service.tools.deps import ToolDeps

MAX_TEXT_CHARS = 2_000


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank")
    return value


Text = Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS), AfterValidator(_not_blank)]


class AddPromiseInput(BaseModel):
    text: Text = Field(description="What the agent promised, in its own words")
    chat_id: ChatId | None = Field(default=None, description="The chat it was promised in, if any")
    to: str | None = Field(
        default=None, max_length=320, description="Who it was promised to (name or UPN)"
    )
    due: datetime | None = Field(default=None, description="When it is due (ISO 8601)")


class ListPromisesInput(BaseModel):
    status: Literal["open", "resolved", "all"] = Field(
        default="open", description="Resolved ones are kept 14 days"
    )


class ResolvePromiseInput(BaseModel):
    id: Annotated[
        str,
        Field(min_length=1, max_length=64, description="The id add_promise or list_promises gave"),
    ]
    note: Text | None = Field(default=None, description="How it was kept (or why it was dropped)")


class PromiseItem(BaseModel):
    id: str
    text: str
    status: str
    created_at: str
    chat_id: str | None
    to: str | None
    due_at: str | None
    resolved_at: str | None
    resolution: str | None


class PromiseResult(BaseModel):
    promise: PromiseItem


class ListPromisesResult(BaseModel):
    promises: list[PromiseItem]
    count: int
    skipped_lines: int = Field(
        description="Unreadable lines in the ledger, left out (an operator should look)"
    )


def _stamp(moment: datetime | None) -> str | None:
    return format_timestamp(moment) if moment is not None else None


def promise_item(promise: Promise) -> PromiseItem:
    return PromiseItem(
        id=promise.id,
        text=promise.text,
        status=promise.status.value,
        created_at=format_timestamp(promise.created_at),
        chat_id=promise.chat_id,
        to=promise.to,
        due_at=_stamp(promise.due_at),
        resolved_at=_stamp(promise.resolved_at),
        resolution=promise.resolution,
    )


def _written(write: PromiseWrite, doing: str) -> PromiseResult:
    if write.outcome is PromiseWriteOutcome.WRITTEN and write.promise is not None:
        return PromiseResult(promise=promise_item(write.promise))
    if write.outcome is PromiseWriteOutcome.CONFLICTED:
        raise ToolError(
            f"Not saved while {doing}: other replicas kept changing the promise ledger at the same "
            "moment. Try again."
        )
    raise ToolError(
        f"Could not confirm {doing}: the promise ledger could not be read or holds a line that is not a "
        "promise (an operator must fix or remove it). Call list_promises before trying again, in "
        "case it was saved."
    )


@dataclass
class PromiseTools:
    deps: ToolDeps

    async def add_promise(self, args: AddPromiseInput, call: ToolCall) -> PromiseResult:
        """Record a promise the agent made (shared by every replica), so it is kept and shows in the daily summary."""
        due = as_utc(args.due) if args.due is not None else None
        write = await self.deps.promises.add(
            args.text, chat_id=args.chat_id, to=args.to, due_at=due
        )
        return _written(write, "adding the promise")

    async def list_promises(self, args: ListPromisesInput, call: ToolCall) -> ListPromisesResult:
        """List the agent's promises: open ones by default, or resolved, or all."""
        status = None if args.status == "all" else PromiseStatus(args.status)
        listed = await self.deps.promises.list(status=status)
        if listed.outcome is ReadOutcome.UNRESOLVED:
            raise ToolError(
                "The promise ledger could not be read right now; try again in a minute."
            )
        items = [promise_item(p) for p in listed.promises]
        return ListPromisesResult(
            promises=items, count=len(items), skipped_lines=listed.skipped_lines
        )

    async def resolve_promise(self, args: ResolvePromiseInput, call: ToolCall) -> PromiseResult:
        """Mark a promise kept (or dropped), with an optional note. Resolving a resolved one changes nothing."""
        write = await self.deps.promises.resolve(args.id.strip(), resolution=args.note)
        if write.outcome is PromiseWriteOutcome.NOT_FOUND:
            raise ToolError(
                f"No promise with id {args.id.strip()!r}; list_promises(status='all') shows the ids "
                "(resolved ones are kept 14 days)."
            )
        return _written(write, "resolving the promise")

"""A "working on it" placeholder: the agent shows a chat it is on the task, updates it, then resolves it.

The single-host system's post/update/resolve placeholder tools, on the fleet's parts: the placeholder
is the agent's own message, posted once (service.tools.chat_send), marked with an hourglass so people
read it as a status, edited in place while the work goes on (people see one message change rather
than a stream of updates), and resolved into the answer — or withdrawn when there is nothing to say.
Only the agent's own messages can be updated or resolved (OwnMessageTools checks), so a resolve after a
replica restart works from any replica with just the ids the post returned.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, Field

from service.delivery.push import format_ts
from service.graph.errors import GraphError
from service.ledger.memory.interactions import Action
from service.mcp.tool_registry import ToolCall, ToolError
from service.tools.action_log import record_action
from service.tools.chat_access import ChatAccess
from service.tools.chat_out import as_posted
from service.tools.chat_send import PostOutcome, SendUnknown
from service.tools.deps import ToolDeps
from service.tools.graph_failures import graph_tool_error
from service.tools.ids import ChatMessageId, NamesAChat
from service.tools.own_messages import DeleteInput, EditInput, OwnMessageTools

MARK = "\u23f3 "  # an hourglass: this message is a status, not the answer
MAX_STATUS_CHARS = 500


class PostPlaceholderInput(NamesAChat):
    status: str = Field(default="Working on it…", min_length=1, max_length=MAX_STATUS_CHARS)


class UpdatePlaceholderInput(NamesAChat):
    message_id: ChatMessageId
    status: str = Field(
        min_length=1, max_length=MAX_STATUS_CHARS, description="What the agent is doing now"
    )


class ResolvePlaceholderInput(NamesAChat):
    message_id: ChatMessageId
    final_text: str | None = Field(
        default=None,
        max_length=28_000,
        description="The answer that replaces the placeholder; omitted: withdraw it",
    )


class PlaceholderResult(BaseModel):
    chat_id: str
    message_id: str
    state: str = Field(description="posted, updated, resolved, or withdrawn")
    posted_at: str | None = None
    post_outcome: PostOutcome | None = None
    next_action: str = Field(serialization_alias="_next_action")


@dataclass
class PlaceholderTools:
    deps: ToolDeps
    access: ChatAccess
    own: OwnMessageTools

    async def post_placeholder(
        self, args: PostPlaceholderInput, call: ToolCall
    ) -> PlaceholderResult:
        """Show a chat you are working on its request: posts an hourglass status you later update and resolve."""
        deps = self.deps
        await self.access.check(args.chat_id)
        content = as_posted(deps, MARK + args.status)
        try:
            posted = await deps.outbox.chat.post(args.chat_id, content)
        except SendUnknown:
            raise ToolError(
                f"The placeholder MAY have been posted to chat {args.chat_id}; check with "
                "read_teams_messages before posting another."
            ) from None
        except GraphError as exc:
            raise graph_tool_error(exc, f"posting a placeholder to chat {args.chat_id}") from None
        await record_action(
            deps,
            call,
            action=Action.SENT.value,
            chat_id=args.chat_id,
            message_id=posted.message.id,
            content=content,
            summary="placeholder",
        )
        return PlaceholderResult(
            chat_id=args.chat_id,
            message_id=posted.message.id,
            state="posted",
            posted_at=format_ts(posted.message.created_date_time),
            post_outcome=posted.outcome,
            next_action=f"Work, update it with update_placeholder(message_id={posted.message.id!r}), and end with "
            "resolve_placeholder — with the answer, or without to withdraw it.",
        )

    async def update_placeholder(
        self, args: UpdatePlaceholderInput, call: ToolCall
    ) -> PlaceholderResult:
        """Change what the placeholder says you are doing (edits it in place; nobody is notified again)."""
        await self.own.edit_teams_message(
            EditInput(chat_id=args.chat_id, message_id=args.message_id, text=MARK + args.status),
            call,
        )
        return PlaceholderResult(
            chat_id=args.chat_id,
            message_id=args.message_id,
            state="updated",
            next_action="Resolve it with resolve_placeholder when the work is done.",
        )

    async def resolve_placeholder(
        self, args: ResolvePlaceholderInput, call: ToolCall
    ) -> PlaceholderResult:
        """End the placeholder: it becomes final_text (your answer), or is withdrawn when final_text is omitted."""
        if args.final_text is not None and args.final_text.strip():
            await self.own.edit_teams_message(
                EditInput(chat_id=args.chat_id, message_id=args.message_id, text=args.final_text),
                call,
            )
            return PlaceholderResult(
                chat_id=args.chat_id,
                message_id=args.message_id,
                state="resolved",
                next_action="Done: the placeholder now holds your answer; do not post it again.",
            )
        await self.own.delete_teams_message(
            DeleteInput(chat_id=args.chat_id, message_id=args.message_id), call
        )
        return PlaceholderResult(
            chat_id=args.chat_id,
            message_id=args.message_id,
            state="withdrawn",
            next_action="Withdrawn.",
        )

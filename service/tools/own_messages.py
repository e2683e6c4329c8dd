"""Fixing or withdrawing what the agent said: edit and soft-delete its own Teams messages.

Only the agent's own messages: the fleet reads the message first and refuses anyone else's before
Graph is asked (Graph refuses them too, but a refusal after the fact says less to the model). An edit
is the same PATCH however often it is sent, so a lost answer is retried; a delete whose answer was
lost is settled by reading the message back (deleted or not), never by deleting blindly again.

Graph's pages relied on (read, not run here): "Update chatMessage" (PATCH, delegated Chat.ReadWrite,
the sender changes the body, 204) and "chatMessage: softDelete" (POST
/users/{userId}/chats/{chatsId}/messages/{chatMessageId}/softDelete, delegated only, 204). Editing or
deleting moves the message's lastModifiedDateTime; the chat poll judges what is new by creation time,
so neither is ever delivered as a new message.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from service.graph.errors import GraphError, GraphNotFound, GraphUnavailable
from service.graph.models import ChatMessage
from service.ledger.memory.interactions import Action
from service.mcp.tool_registry import ToolCall, ToolError
from service.tools.chat_access import ChatAccess
from service.tools.deps import ToolDeps
from service.tools.graph_failures import graph_tool_error
from service.tools.ids import ChatMessageId, NamesAChat
from service.tools.action_log import record_action
from service.tools.chat_out import MAX_TEXT_CHARS, as_posted

log = logging.getLogger(__name__)


class EditInput(NamesAChat):
    message_id: ChatMessageId
    text: str = Field(
        min_length=1, max_length=MAX_TEXT_CHARS, description="The message's new text, whole"
    )
    content_type: Literal["text", "html"] = Field(
        default="text", description="html keeps Teams formatting"
    )

    @field_validator("text")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("text is blank; to withdraw a message use delete_teams_message")
        return value


class DeleteInput(NamesAChat):
    message_id: ChatMessageId


class OwnMessageResult(BaseModel):
    chat_id: str
    message_id: str
    state: Literal["edited", "deleted", "already_deleted"]
    interaction_logged: bool
    next_action: str = Field(serialization_alias="_next_action")


@dataclass
class OwnMessageTools:
    deps: ToolDeps
    access: ChatAccess

    async def edit_teams_message(self, args: EditInput, call: ToolCall) -> OwnMessageResult:
        """Replace the text of a message the agent itself posted (message_id from send_teams_message).

        People see it marked as edited; nobody is notified again. You cannot edit anyone else's message.
        """
        await self.access.check(args.chat_id)
        message = await self._own(args.chat_id, args.message_id, doing="editing")
        if message.deleted_date_time is not None:
            raise ToolError(
                f"Message {args.message_id} was deleted and cannot be edited; post a new message "
                "with send_teams_message if it is still needed."
            )
        content = as_posted(self.deps, args.text)
        try:
            await self.deps.graph.messages.update_chat_message(
                args.chat_id, args.message_id, content, args.content_type
            )
        except GraphError as exc:
            raise graph_tool_error(
                exc, f"editing message {args.message_id} in chat {args.chat_id}"
            ) from None
        logged = await self._record(call, args.chat_id, args.message_id, Action.EDITED, content)
        log.info(
            "chat message edited", extra={"chat_id": args.chat_id, "message_id": args.message_id}
        )
        return OwnMessageResult(
            chat_id=args.chat_id,
            message_id=args.message_id,
            state="edited",
            interaction_logged=logged,
            next_action="Edited; do not post the text again as a new message.",
        )

    async def delete_teams_message(self, args: DeleteInput, call: ToolCall) -> OwnMessageResult:
        """Withdraw (soft-delete) a message the agent itself posted. It shows as deleted in Teams.

        You cannot delete anyone else's message. Deleting one already deleted reports already_deleted.
        """
        await self.access.check(args.chat_id)
        message = await self._own(args.chat_id, args.message_id, doing="deleting")
        if message.deleted_date_time is not None:
            return self._deleted(args, "already_deleted", logged=False)
        try:
            await self.deps.graph.messages.soft_delete_chat_message(
                self.deps.agent.object_id, args.chat_id, args.message_id
            )
        except GraphError as exc:
            if not (isinstance(exc, GraphUnavailable) and exc.outcome_unknown):
                raise graph_tool_error(
                    exc, f"deleting message {args.message_id} in chat {args.chat_id}"
                ) from None
            # The delete may have happened: the message itself says whether it did.
            settled = await self._own(args.chat_id, args.message_id, doing="checking the delete of")
            if settled.deleted_date_time is None:
                raise ToolError(
                    f"Message {args.message_id} was not deleted: Microsoft Graph failed, and the "
                    "message read back afterwards is still there. Try delete_teams_message again."
                ) from None
        logged = await self._record(call, args.chat_id, args.message_id, Action.DELETED, None)
        log.info(
            "chat message deleted", extra={"chat_id": args.chat_id, "message_id": args.message_id}
        )
        return self._deleted(args, "deleted", logged=logged)

    @property
    def _delegated(self) -> bool:
        return self.deps.options.auth_mode == "delegated"

    async def _own(self, chat_id: str, message_id: str, *, doing: str) -> ChatMessage:
        """The message, when the agent posted it; a ToolError otherwise (fail closed: nothing is changed)."""
        try:
            message = await self.deps.graph.messages.get_chat_message(chat_id, message_id)
        except GraphNotFound:
            raise ToolError(
                f"Message {message_id} is not in chat {chat_id}. Use the message_id that "
                "send_teams_message returned, with the chat_id it was posted to."
            ) from None
        except GraphError as exc:
            raise graph_tool_error(exc, f"{doing} message {message_id} in chat {chat_id}") from None
        sender = message.sender.id if message.sender is not None else None
        # Delegated mode posts as the signed-in person, so only the ids the fleet recorded say which are
        # ours (never the prefix: the person's own message may carry it, and editing theirs is not ours to do).
        if self._delegated:
            sent = await self.deps.sent_messages.view(chat_id, [message_id])
            if not sent.readable:
                raise ToolError(
                    "The fleet's record of the agent's sent messages cannot be read just now, so it "
                    "cannot tell whether you posted this message. Nothing was changed; try again."
                )
            ours = message_id in sent.ids
        else:
            ours = sender == self.deps.agent.object_id
        if not ours:
            raise ToolError(
                f"Message {message_id} was not posted by the agent; you can only edit or delete "
                "your own messages. Nothing was changed."
            )
        return message

    def _deleted(
        self, args: DeleteInput, state: Literal["deleted", "already_deleted"], *, logged: bool
    ) -> OwnMessageResult:
        return OwnMessageResult(
            chat_id=args.chat_id,
            message_id=args.message_id,
            state=state,
            interaction_logged=logged,
            next_action="Deleted; it cannot be edited any more.",
        )

    async def _record(
        self, call: ToolCall, chat_id: str, message_id: str, action: Action, content: str | None
    ) -> bool:
        return await record_action(
            self.deps,
            call,
            action=action.value,
            chat_id=chat_id,
            message_id=message_id,
            content=content,
        )

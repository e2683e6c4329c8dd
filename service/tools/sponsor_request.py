"""The rule behind every tool that acts on a sponsor's word alone (add_chat_member, share_file): the
call cites the sponsor's message that asked, and the fleet reads that message from Graph.

The model cannot vouch for who asked, since any text in its context may be a person's; so the message
itself is the proof: written by a sponsor of the agent identity (the directory's list, not a chat's),
in a chat the agent can read, within the last day, not deleted.
"""

from __future__ import annotations

from datetime import timedelta

from service.graph.errors import GraphError, GraphNotFound
from service.graph.models import ChatMessage
from service.mcp.tool_registry import ToolError
from service.tools.chat_access import ChatAccess
from service.tools.deps import ToolDeps
from service.tools.graph_failures import graph_tool_error

REQUEST_MAX_AGE = timedelta(hours=24)  # a sponsor's ask older than this is not a standing order


async def sponsor_who_asked(
    deps: ToolDeps, access: ChatAccess, chat_id: str, message_id: str, *, asked_for: str
) -> str:
    """The object id of the sponsor whose message ``message_id`` in ``chat_id`` asked for
    ``asked_for`` ("someone to be added"); a ToolError when the message is not a sponsor's live ask."""
    await access.check(chat_id)
    try:
        ask = await deps.graph.messages.get_chat_message(chat_id, message_id)
    except GraphNotFound:
        raise ToolError(
            f"Message {message_id} is not in chat {chat_id}; cite the sponsor's message that asked "
            f"for {asked_for}."
        ) from None
    except GraphError as exc:
        raise graph_tool_error(exc, f"reading the message that asked for {asked_for}") from None
    sender = ask.sender.id if ask.sender is not None else None
    if not _is_live(deps, ask) or sender is None or not deps.gate.is_directory_sponsor(sender):
        raise ToolError(
            f"Only a sponsor of the agent may ask for {asked_for}, in a message from the last day; "
            "the cited message is not one. Nothing was changed."
        )
    return sender


def _is_live(deps: ToolDeps, ask: ChatMessage) -> bool:
    return ask.deleted_date_time is None and deps.clock() - ask.created_date_time <= REQUEST_MAX_AGE

"""The audit trail: every action the agent takes through a tool, appended to the interaction log.

Sends, edits, deletes, members added, permission requests asked and verdicts relayed each become one
``direction: out`` record in ``interactions/<day>.jsonl`` with who asked for it: the MCP session and
the host's client name and version (as the host declared them at initialize), and the replica that
acted. ``read_interactions`` (direction ``out``) reads them back. The log is the shared container's
append-only day files, so every replica's actions land in one place whichever replica a host reached.
"""

from __future__ import annotations

import json

from service.ledger.memory.interactions import Channel, Direction, Interaction
from service.mcp.tool_registry import ToolCall
from service.tools.deps import ToolDeps


def who_asked(call: ToolCall | None) -> tuple[tuple[str, str], ...]:
    """The session and host of a call, as the record's extra fields (JSON-encoded values)."""
    session = call.session if call is not None else None
    if session is None:
        return ()
    host = f"{session.client_name}/{session.client_version}"
    return (("host", json.dumps(host)), ("session", json.dumps(session.session_id)))


async def record_action(
    deps: ToolDeps,
    call: ToolCall | None,
    *,
    action: str,
    chat_id: str | None,
    message_id: str | None = None,
    content: str | None = None,
    summary: str = "",
    channel: Channel = Channel.CHAT,
) -> bool:
    """One audit record; False when the log is unwritable (the action itself has happened)."""
    extra = (*who_asked(call), ("replica", json.dumps(deps.replica_id)))
    return await deps.interactions.record(
        Interaction(
            ts=deps.clock(),
            direction=Direction.OUT,
            channel=channel,
            action=action,
            chat_id=chat_id,
            message_id=message_id,
            sender=deps.agent.object_id,
            summary=summary,
            body=content,
            extra=tuple(sorted(extra)),
        )
    )

"""What the agent posts in Teams, whichever tool posts it: the text's limits and prefix, and its log line.

Every outbound chat action (a send, an edit, a delete) is recorded in the interaction log with the
replica that did it, so the day's summary and the audit trail see the agent's side of a conversation.
"""

from __future__ import annotations

import json

from service.domain.source import Source
from service.ledger.interactions import Direction, Interaction
from service.tools.deps import ToolDeps

# Delegated mode posts as the signed-in human; the prefix tells people which messages the agent wrote.
DELEGATED_PREFIX = "[EntraBot] "
MAX_TEXT_CHARS = 28_000  # Teams refuses chat messages much over ~28 KB


def as_posted(deps: ToolDeps, text: str) -> str:
    """The text as the agent's message carries it in this auth mode."""
    return DELEGATED_PREFIX + text if deps.settings.auth_mode == "delegated" else text


async def record_chat_out(deps: ToolDeps, chat_id: str, message_id: str | None, action: str,
                          content: str | None) -> bool:
    """One interaction line for something the agent did in a chat; False when the log is unwritable."""
    return await deps.interactions.record(Interaction(
        ts=deps.clock(), direction=Direction.OUT, channel=Source.CHAT, action=action, chat_id=chat_id,
        message_id=message_id, sender=deps.agent.object_id, body=content,
        extra=(("replica", json.dumps(deps.replica_id)),),
    ))

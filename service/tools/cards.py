"""An Adaptive Card in a Teams chat, posted by the agent user once.

Graph takes a card in a chat message as an attachment (contentType application/vnd.microsoft.card.adaptive,
the card as a JSON string) placed by ``<attachment id="…"></attachment>`` in an HTML body (read, not
run: "Send chatMessage in a chat" and "Working with Microsoft Teams messaging APIs"). The agent posts as
a user, not as a bot, so nothing would receive a card's submit: only actions that open a link are
taken (Action.OpenUrl, Action.ShowCard with such actions inside), and a card asking for input says so.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field, field_validator

from service.delivery.push import format_ts
from service.graph.errors import GraphError
from service.graph.models import OutboundCard
from service.ledger.memory.interactions import Action
from service.mcp.tool_registry import ToolCall, ToolError
from service.tools.action_log import record_action
from service.tools.chat_access import ChatAccess
from service.tools.chat_out import MAX_TEXT_CHARS
from service.tools.chat_send import PostOutcome, SendUnknown
from service.tools.deps import ToolDeps
from service.tools.graph_failures import graph_tool_error
from service.tools.ids import NamesAChat

ADAPTIVE_CARD = "application/vnd.microsoft.card.adaptive"
OPEN_ACTIONS = frozenset({"Action.OpenUrl", "Action.ShowCard", "Action.ToggleVisibility"})
INPUT_PREFIX = "Input."


def _elements(node: Any) -> Iterator[dict[str, Any]]:
    """Every object in the card, depth first."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _elements(value)
    elif isinstance(node, list):
        for value in node:
            yield from _elements(value)


class CardInput(NamesAChat):
    card: dict[str, Any] = Field(
        description='The Adaptive Card JSON: {"type": "AdaptiveCard", "version": "1.5", '
        '"body": [...], "actions": [...]} (links only: no submit)'
    )

    @field_validator("card")
    @classmethod
    def _a_card_a_person_can_use(cls, card: dict[str, Any]) -> dict[str, Any]:
        if card.get("type") != "AdaptiveCard" or not isinstance(card.get("version"), str):
            raise ValueError(
                'card must be an Adaptive Card: "type": "AdaptiveCard" with a "version" string'
            )
        if not isinstance(card.get("body"), list) or not card["body"]:
            raise ValueError("card.body must list at least one element (a TextBlock, say)")
        for element in _elements(card):
            kind = element.get("type")
            if isinstance(kind, str) and kind.startswith("Action.") and kind not in OPEN_ACTIONS:
                raise ValueError(
                    f"{kind} needs a bot to receive it, and the agent posts as a user: use "
                    "Action.OpenUrl, or ask in text and read the reply"
                )
            if isinstance(kind, str) and kind.startswith(INPUT_PREFIX):
                raise ValueError(f"{kind} collects input nobody would receive; ask in text instead")
        if len(json.dumps(card)) > MAX_TEXT_CHARS:
            raise ValueError(
                f"the card is over {MAX_TEXT_CHARS} characters as JSON; Teams refuses it"
            )
        return card


class CardResult(BaseModel):
    chat_id: str
    message_id: str
    posted_at: str
    post_outcome: PostOutcome
    interaction_logged: bool
    next_action: str = Field(serialization_alias="_next_action")


@dataclass
class CardTools:
    deps: ToolDeps
    access: ChatAccess

    async def send_adaptive_card(self, args: CardInput, call: ToolCall) -> CardResult:
        """Post an Adaptive Card (a formatted status, a table of facts, links) to one Teams chat as the agent user.

        Links only: a card cannot collect input or submit, because the agent posts as a person, not a bot.
        """
        deps = self.deps
        await self.access.check(args.chat_id)
        card = OutboundCard(uuid.uuid4().hex, ADAPTIVE_CARD, json.dumps(args.card))
        body = f'<attachment id="{card.id}"></attachment>'
        try:
            posted = await deps.outbox.chat.post(args.chat_id, body, "html", cards=(card,))
        except SendUnknown:
            await record_action(
                deps, call, action="card_unconfirmed", chat_id=args.chat_id, content=card.content
            )
            raise ToolError(
                f"The card MAY have been posted to chat {args.chat_id}: Microsoft Graph failed after "
                "receiving it, twice, and reading the chat back could not tell. Check with "
                "read_teams_messages before posting it again."
            ) from None
        except GraphError as exc:
            raise graph_tool_error(exc, f"posting a card to chat {args.chat_id}") from None
        logged = await record_action(
            deps,
            call,
            action=Action.SENT.value,
            chat_id=args.chat_id,
            message_id=posted.message.id,
            content=card.content,
            summary="adaptive card",
        )
        return CardResult(
            chat_id=args.chat_id,
            message_id=posted.message.id,
            posted_at=format_ts(posted.message.created_date_time),
            post_outcome=posted.outcome,
            interaction_logged=logged,
            next_action="Posted; do not post it again.",
        )

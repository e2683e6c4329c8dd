"""What Graph returns for Teams teams, channels and channel messages, as typed models at the edge (the
rules of ``service.graph.models`` apply: snake_case attributes, unknown fields ignored, a wrong type
makes the item invalid and its page skips it).

A channel message is a chatMessage with ``channelIdentity {teamId, channelId}`` and, on a reply,
``replyToId`` naming its root ("chatMessage resource type", and the examples of "List channel messages"
and "chatMessage: delta"; read, not run here).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import field_validator

from service.graph.models import ChatMessage, GraphModel

# "standard", "private", "shared"; Graph may add members, and none is decided on here.
MembershipType = Literal["standard", "private", "shared", "unknownFutureValue"]


class Team(GraphModel):
    id: str
    display_name: str | None = None


class Channel(GraphModel):
    id: str
    display_name: str | None = None
    membership_type: MembershipType | None = None


class ChannelIdentity(GraphModel):
    team_id: str
    channel_id: str


class MentionedUser(GraphModel):
    id: str
    display_name: str | None = None


class ChatMessageMention(GraphModel):
    """``<at id="{id}">{mention_text}</at>`` in the body; ``user`` is None when an app, a channel or a
    team was mentioned rather than a person."""

    id: int
    mention_text: str | None = None
    user: MentionedUser | None = None


def _mentioned_user(raw: Any) -> Any:
    """Graph's {"mentioned": {"user": {...}}} → {"user": {...}}."""
    if isinstance(raw, dict) and "mentioned" in raw and "user" not in raw:
        mentioned = raw.get("mentioned")
        return {**raw, "user": mentioned.get("user") if isinstance(mentioned, dict) else None}
    return raw


class ChannelMessage(ChatMessage):
    """A channel root message or reply."""

    channel_identity: ChannelIdentity | None = None
    mentions: tuple[ChatMessageMention, ...] = ()
    subject: str | None = None  # a root's subject line, when its author wrote one

    @field_validator("mentions", mode="before")
    @classmethod
    def _mentions(cls, v: Any) -> Any:
        if v is None:
            return ()
        return [_mentioned_user(m) for m in v] if isinstance(v, list) else v


class ChannelThread(ChannelMessage):
    """A root as delta and ``$expand=replies`` list it: with its replies."""

    replies: tuple[ChannelMessage, ...] = ()

    @field_validator("replies", mode="before")
    @classmethod
    def _null_replies(cls, v: Any) -> Any:
        return () if v is None else v

"""What the agent posts in Teams, whichever tool posts it: the text's limits and its prefix, the fields a
posting tool takes, and the body as posted (mentions placed, prefixed, capped)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from service.graph.authorship import DELEGATED_PREFIX
from service.graph.models import ChatMember
from service.mcp.tool_registry import ToolError
from service.tools.deps import ToolDeps
from service.tools.ids import UserRef
from service.tools.mentions import MAX_MENTIONS, Composed, MentionError, compose

__all__ = ["DELEGATED_PREFIX", "MAX_TEXT_CHARS", "PostText", "as_posted", "composed_post"]
MAX_TEXT_CHARS = 28_000  # Teams refuses chat messages much over ~28 KB


class PostText(BaseModel):
    """The text a posting tool takes, and whom it mentions."""

    text: str = Field(
        min_length=1,
        max_length=MAX_TEXT_CHARS,
        description="The message to post; write @{0}, @{1}… where the people in mentions go",
    )
    content_type: Literal["text", "html"] = Field(
        default="text", description="html keeps Teams formatting"
    )
    mentions: list[UserRef] = Field(
        default_factory=list,
        max_length=MAX_MENTIONS,
        description="UPNs or object ids of the people to @mention (in a chat, its members), in "
        "@{n} order",
    )

    @field_validator("text")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("text is blank; write the message you want to post")
        return value


def as_posted(deps: ToolDeps, text: str) -> str:
    """The text as the agent's message carries it in this auth mode."""
    return DELEGATED_PREFIX + text if deps.options.auth_mode == "delegated" else text


def composed_post(deps: ToolDeps, args: PostText, mentioned: Sequence[ChatMember]) -> Composed:
    """The body as posted: the people in ``mentioned`` placed, the delegated prefix, the cap; a ToolError
    that says how to fix the call otherwise."""
    try:
        composed = compose(as_posted(deps, args.text), args.content_type, mentioned)
    except MentionError as exc:
        raise ToolError(f"{exc}. Nothing was posted.") from None
    if len(composed.content) > MAX_TEXT_CHARS:
        raise ToolError(
            f"The message is {len(composed.content)} characters as posted; Teams takes at most "
            f"{MAX_TEXT_CHARS}. Shorten it or split it. Nothing was posted."
        )
    return composed

"""The chat a Teams tool acts on: always named by the caller, because there is no default chat.

A chat id comes from ``list_watched_chats``, from a message the agent received, or from
``create_chat``. A missing, empty or blank ``chat_id`` is refused with that advice before any tool
runs, rather than falling back to some conversation the model did not mean.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, Field, model_validator

MAX_CHAT_ID_CHARS = 512

NO_DEFAULT_CHAT = (
    "chat_id is required: there is no default chat. Pass the chat_id of a watched chat "
    "(list_watched_chats), of a message you received, or of a chat you created (create_chat)."
)


def _present(value: Any) -> Any:
    # Before the length check, so an empty or blank id gets the advice instead of "too short".
    if isinstance(value, str):
        value = value.strip()
        if not value:
            raise ValueError(NO_DEFAULT_CHAT)
    return value


def _one_token(value: str) -> str:
    if any(ch.isspace() or not ch.isprintable() for ch in value):
        raise ValueError(
            "chat_id holds whitespace or control characters; pass the id exactly as list_watched_chats "
            "or the message you received shows it"
        )
    return value


ChatId = Annotated[
    str,
    BeforeValidator(_present),
    Field(
        min_length=1,
        max_length=MAX_CHAT_ID_CHARS,
        description="The Teams chat id, e.g. 19:...@thread.v2 (from list_watched_chats, a received message, "
        "or create_chat). Required: there is no default chat.",
    ),
    AfterValidator(_one_token),
]


class NamesAChat(BaseModel):
    """Input of a tool that acts on one chat; ``chat_id`` is required (and schema-required)."""

    chat_id: ChatId

    @model_validator(mode="before")
    @classmethod
    def _chat_named(cls, data: Any) -> Any:
        # A missing field would otherwise read "Field required", which does not say where to get one.
        if isinstance(data, dict) and data.get("chat_id") is None:
            raise ValueError(NO_DEFAULT_CHAT)
        return data

"""Identifiers the model passes to tools, checked before any Graph call: chats, users, mail.

A Teams tool always names its chat, because there is no default chat. A chat id comes from
``list_watched_chats``, from a message the agent received, or from ``create_chat``; a missing, empty or
blank ``chat_id`` is refused with that advice before any tool runs, rather than falling back to some
conversation the model did not mean.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, Field, model_validator

MAX_CHAT_ID_CHARS = 512
MAX_ID_CHARS = 512

NO_DEFAULT_CHAT = (
    "chat_id is required: there is no default chat. Pass the chat_id of a watched chat "
    "(list_watched_chats), of a message you received, or of a chat you created (create_chat)."
)


def one_token(value: str, *, what: str, where: str) -> str:
    """``value`` without surrounding blanks, refused when it cannot be a single Graph id.

    "." and ".." are refused here because the Graph client would otherwise refuse them as path segments,
    which the host would only see as a server failure.
    """
    value = value.strip()
    if (
        not value
        or value in (".", "..")
        or any(ch.isspace() or not ch.isprintable() for ch in value)
    ):
        raise ValueError(
            f"{what} must be one id without spaces or control characters, exactly as {where} shows it"
        )
    return value


def _present(value: Any) -> Any:
    # Before the length check, so an empty or blank id gets the advice instead of "too short".
    if isinstance(value, str):
        value = value.strip()
        if not value:
            raise ValueError(NO_DEFAULT_CHAT)
    return value


def _chat_token(value: str) -> str:
    return one_token(value, what="chat_id", where="list_watched_chats or the message you received")


ChatId = Annotated[
    str,
    BeforeValidator(_present),
    Field(
        min_length=1,
        max_length=MAX_CHAT_ID_CHARS,
        description="The Teams chat id, e.g. 19:...@thread.v2 (from list_watched_chats, a received message, "
        "or create_chat). Required: there is no default chat.",
    ),
    AfterValidator(_chat_token),
]


def _user_token(value: str) -> str:
    return one_token(
        value,
        what="each member",
        where="the directory (a UPN such as ada@contoso.com, or an object id)",
    )


UserRef = Annotated[str, Field(max_length=320), AfterValidator(_user_token)]


def _mail_token(value: str) -> str:
    return one_token(value, what="message_id", where="read_email")


MailId = Annotated[str, Field(max_length=MAX_ID_CHARS), AfterValidator(_mail_token)]


def _chat_message_token(value: str) -> str:
    return one_token(
        value, what="message_id", where="send_teams_message's result or the message you received"
    )


ChatMessageId = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_ID_CHARS,
        description="The Teams message id, e.g. 1733140000123",
    ),
    AfterValidator(_chat_message_token),
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


def _team_token(value: str) -> str:
    return one_token(value, what="team_id", where="list_channels")


def _channel_token(value: str) -> str:
    return one_token(value, what="channel_id", where="list_channels")


def _channel_message_token(value: str) -> str:
    return one_token(value, what="message_id", where="read_channel")


TeamId = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_ID_CHARS,
        description="The team's id, a GUID (from list_channels)",
    ),
    AfterValidator(_team_token),
]
ChannelId = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_ID_CHARS,
        description="The channel's id, e.g. 19:...@thread.tacv2 (from list_channels)",
    ),
    AfterValidator(_channel_token),
]
ChannelMessageId = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_ID_CHARS,
        description="A root message's id, e.g. 1733140000123 (from read_channel)",
    ),
    AfterValidator(_channel_message_token),
]


class NamesAChannel(BaseModel):
    """Input of a tool that acts on one team channel."""

    team_id: TeamId
    channel_id: ChannelId

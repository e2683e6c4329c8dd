"""What a claimed message becomes for a host: a channel push, or an item of a read tool's result.

A push is ``notifications/claude/channel`` with ``{"content": str, "meta": {chat_id, message_id, user,
ts}}`` (SPEC §5); a team channel's message adds ``team``, ``team_channel`` (names) and ``thread`` (its
root's id), left out of the JSON for any other message. Claude Code turns ``meta`` into attributes of
a ``<channel …>`` tag around the content, so nothing in the payload may carry an angle bracket, and
meta values must not carry quotes.
"""

from __future__ import annotations

import re
import unicodedata
from datetime import datetime, timezone
from typing import Any, Final, Literal

from mcp.types import Notification
from pydantic import (
    BaseModel,
    ConfigDict,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from service.domain.message import EMAIL_CHAT_ID, InboundMessage, Source
from service.delivery.xpia import (
    DEFAULT_PUSH_MAX_CHARS,
    bare_for_channel,
    find_envelope_words,
    neutralise,
    wrap_external,
    wrap_for_channel,
)

CHANNEL_METHOD: Final = "notifications/claude/channel"
MAX_META_CHARS = 512
_META_INPUT_CHARS = 320  # what neutralise() may grow by still fits MAX_META_CHARS

# Characters a meta value may not hold: brackets and quotes would break out of the host's attribute,
# "&" would start an entity. Besides these, no control, format or separator character but the space.
_META_FORBIDDEN = frozenset('<>"&`\\')
_ANGLE_BRACKETS = re.compile("[<>]")


def _meta_char_ok(ch: str) -> bool:
    return ch == " " or (ch not in _META_FORBIDDEN and unicodedata.category(ch)[0] not in "CZ")


def _meta_char(ch: str) -> str:
    if _meta_char_ok(ch):
        return ch
    return "" if ch in _META_FORBIDDEN else " "  # a line break or tab still separates words


def meta_value(text: str) -> str:
    """``text`` made fit for a meta value: one line, no quote or bracket, no envelope word, bounded."""
    cleaned = "".join(map(_meta_char, text))
    return neutralise(" ".join(cleaned.split())[:_META_INPUT_CHARS])


class ChannelMeta(BaseModel):
    """The four attributes a push carries; keys are identifiers, values hold nothing that breaks out."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    chat_id: str
    message_id: str
    user: str
    ts: str
    team: str | None = None
    team_channel: str | None = None
    thread: str | None = None

    @field_validator("chat_id", "message_id", "user", "ts", "team", "team_channel", "thread")
    @classmethod
    def _safe(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if (
            not all(map(_meta_char_ok, value))
            or len(value) > MAX_META_CHARS
            or find_envelope_words(value)
        ):
            raise ValueError(
                "a meta value must be one line of at most "
                f'{MAX_META_CHARS} characters without <>"&`\\ or an envelope word; pass it through meta_value()'
            )
        return value

    @model_serializer(mode="wrap")
    def _without_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # The SDK dumps the push itself (no exclude_none), and the host reads meta as string
        # attributes: a null would arrive as "None" or break the tag.
        return {k: v for k, v in handler(self).items() if v is not None}


class ChannelParams(BaseModel):
    # A plain model, not mcp's NotificationParams: that one reserves "meta" for "_meta" and camelCases
    # field names, while the host expects exactly "meta" and "chat_id".
    model_config = ConfigDict(extra="forbid", frozen=True)

    content: str
    meta: ChannelMeta


# mcp bounds Notification's params to its NotificationParams or a dict; pydantic does not enforce the
# bound, and the SDK only dumps the model (by_alias, mode="json"), which ChannelParams supports.
class ChannelPush(Notification[ChannelParams, Literal["notifications/claude/channel"]]):  # type: ignore[type-var]
    """The push, as the MCP SDK sends it: ``await session.send_notification(push)``."""

    method: Literal["notifications/claude/channel"] = CHANNEL_METHOD
    params: ChannelParams

    @model_validator(mode="after")
    def _no_angle_brackets(self) -> ChannelPush:
        if _ANGLE_BRACKETS.search(self.model_dump_json()):
            raise ValueError(
                "a channel push may not contain '<' or '>' anywhere; build it with build_channel_push()"
            )
        return self


def envelope_text(message: InboundMessage) -> str:
    """What goes inside the envelope: for mail the subject too, which the sender wrote as well, and
    for a channel message its thread's subject, which the root's author wrote."""
    if message.source is Source.EMAIL:
        return f"Subject: {message.subject or ''}\n\n{message.body}"
    if message.place is not None and message.place.thread_subject:
        return f"Thread: {message.place.thread_subject}\n\n{message.body}"
    return message.body


def format_ts(moment: datetime) -> str:
    """UTC, ISO 8601 with milliseconds and a Z (a naive datetime is taken as UTC, as Graph means it)."""
    utc = (
        moment.replace(tzinfo=timezone.utc)
        if moment.tzinfo is None
        else moment.astimezone(timezone.utc)
    )
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def _sender_label(message: InboundMessage) -> str:
    return message.sender_name.strip() or message.sender_id


def build_channel_push(
    message: InboundMessage, *, max_chars: int = DEFAULT_PUSH_MAX_CHARS
) -> ChannelPush:
    """The push for a claimed message.

    A verified sponsor's chat message goes bare (the host's prompt trusts it), sanitised all the same;
    everything else is wrapped, and mail always is, whoever sent it.
    """
    if message.source is Source.CHAT and message.sender_is_sponsor:
        content = bare_for_channel(message.body, max_chars=max_chars)
    else:
        content = wrap_for_channel(
            envelope_text(message),
            source=message.source,
            sender=_sender_label(message),
            max_chars=max_chars,
        )
    chat_id = EMAIL_CHAT_ID if message.source is Source.EMAIL else message.chat_id
    meta = ChannelMeta(
        chat_id=meta_value(chat_id),
        message_id=meta_value(message.message_id),
        user=meta_value(_sender_label(message)),
        ts=format_ts(message.created),
        **_place_meta(message),
    )
    return ChannelPush(params=ChannelParams(content=content, meta=meta))


def _place_meta(message: InboundMessage) -> dict[str, str]:
    """A channel message's team and channel names (written by the team's owners, so cleaned like the
    sender's name) and its thread's root id; nothing for any other message. The thread's subject is
    the root author's words: it goes inside the envelope, as a mail's subject does."""
    place = message.place
    if place is None:
        return {}
    return {
        "team": meta_value(place.team_name or place.team_id),
        "team_channel": meta_value(place.channel_name or place.channel_id),
        "thread": meta_value(place.thread_id),
    }


def build_tool_result_item(
    message: InboundMessage, *, max_chars: int | None = None
) -> dict[str, Any]:
    """One message in a read tool's result: identifiers and times outside, the text always enveloped.

    Filters and counts work on the metadata directly; only ``content`` comes from the sender.
    """
    return {
        "source": message.source.envelope_word,
        "chat_id": EMAIL_CHAT_ID if message.source is Source.EMAIL else message.chat_id,
        "message_id": message.message_id,
        "sender_id": message.sender_id,
        "sender_is_sponsor": message.sender_is_sponsor,
        "created": format_ts(message.created),
        "content": wrap_external(
            envelope_text(message),
            source=message.source,
            sender=_sender_label(message),
            max_chars=max_chars,
        ),
    }

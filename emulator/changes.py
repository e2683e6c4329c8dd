"""What the tenant state tells its observers: one resource created, updated or deleted.

The state calls observers from whichever thread changed it (the server's, or a test's injecting
directly), with its lock held, so an observer must only hand the change on, never block or call back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

ChangeType = Literal["created", "updated", "deleted"]


@dataclass(frozen=True)
class ChatMessageChange:
    change_type: ChangeType
    chat_id: str
    message_id: str
    member_ids: tuple[
        str, ...
    ]  # the chat's members at the time: who a getAllMessages subscription covers


@dataclass(frozen=True)
class MailChange:
    change_type: ChangeType
    owner_id: str
    folder: str  # "inbox" | "sentitems"
    message_id: str
    change_key: str


@dataclass(frozen=True)
class ChannelMessageChange:
    """A channel message or a reply (``reply_to_id`` names its root) created, updated or deleted."""

    change_type: ChangeType
    team_id: str
    channel_id: str
    message_id: str
    reply_to_id: str | None


ResourceChange = ChatMessageChange | MailChange | ChannelMessageChange
ChangeObserver = Callable[[ResourceChange], None]

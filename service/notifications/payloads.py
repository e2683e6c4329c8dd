"""Graph change-notification payloads, as the webhook receives them.

Read, not run here (no tenant): Microsoft Graph "Receive change notifications through webhooks" and
"Get change notifications for messages in Teams channels and chats". A POST carries
``{"value": [changeNotification, ...]}``; each item has ``subscriptionId``, ``changeType``,
``resource`` (for chat messages ``chats('{chat id}')/messages('{message id}')``; for a channel's
``teams('{team id}')/channels('{channel id}')/messages('{message id}')``, a reply
``.../messages('{root id}')/replies('{reply id}')``; for mail ``Users/{id}/Messages/{id}``), ``resourceData`` (``id``, ``@odata.type``, ``@odata.id``),
``clientState``, ``tenantId`` and ``subscriptionExpirationDateTime``. Lifecycle notifications carry
``lifecycleEvent`` (reauthorizationRequired, subscriptionRemoved, missed) instead of a change.
Parsing is lenient about fields we do not use: Graph adds some over time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

# Both the OData key form Graph sends and the path form (``chats/{id}/messages/{id}``).
_CHAT_MESSAGE = re.compile(
    r"chats(?:\('(?P<chat>[^']+)'\)|/(?P<chat2>[^/()]+))/messages(?:\('(?P<msg>[^']+)'\)|/(?P<msg2>[^/()]+))?",
    re.IGNORECASE,
)
# A channel message or reply, in both forms too. How Graph names a reply in a notification is not on
# the pages read; the emulator writes ``messages('{root}')/replies('{reply}')`` (emulator/
# channel_subscriptions.py), and the path form is accepted alike.
_KEY = r"(?:\('(?P<{0}>[^']+)'\)|/(?P<{0}2>[^/()']+))"
_CHANNEL_MESSAGE = re.compile(
    r"teams"
    + _KEY.format("team")
    + "/channels"
    + _KEY.format("channel")
    + "/messages"
    + _KEY.format("msg")
    + "?(?:/replies"
    + _KEY.format("reply")
    + ")?",
    re.IGNORECASE,
)
_MAIL = re.compile(r"users/[^/]+/(?:mailFolders(?:\('[^']+'\)|/[^/]+)/)?messages", re.IGNORECASE)


class ResourceData(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    id: str | None = None
    odata_type: str | None = Field(default=None, alias="@odata.type")


class ChangeNotification(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    subscription_id: str | None = Field(default=None, alias="subscriptionId")
    change_type: str | None = Field(default=None, alias="changeType")
    resource: str | None = None
    resource_data: ResourceData | None = Field(default=None, alias="resourceData")
    client_state: str | None = Field(default=None, alias="clientState")
    tenant_id: str | None = Field(default=None, alias="tenantId")
    lifecycle_event: str | None = Field(default=None, alias="lifecycleEvent")


class NotificationBatch(BaseModel):
    model_config = ConfigDict(extra="allow")

    value: list[ChangeNotification]


@dataclass(frozen=True, slots=True)
class ChatMessageRef:
    chat_id: str
    message_id: str | None


def chat_message_of(notification: ChangeNotification) -> ChatMessageRef | None:
    match = _CHAT_MESSAGE.search(notification.resource or "")
    if match is None:
        return None
    chat = match.group("chat") or match.group("chat2")
    message = match.group("msg") or match.group("msg2")
    if message is None and notification.resource_data is not None:
        message = notification.resource_data.id
    return ChatMessageRef(chat, message) if chat else None


@dataclass(frozen=True, slots=True)
class ChannelMessageRef:
    team_id: str
    channel_id: str
    message_id: str | None  # the reply's id for a reply, else the message's


def channel_message_of(notification: ChangeNotification) -> ChannelMessageRef | None:
    match = _CHANNEL_MESSAGE.search(notification.resource or "")
    if match is None:
        return None
    team = match.group("team") or match.group("team2")
    channel = match.group("channel") or match.group("channel2")
    message = (
        match.group("reply")
        or match.group("reply2")
        or match.group("msg")
        or match.group("msg2")
        or (notification.resource_data.id if notification.resource_data is not None else None)
    )
    if not team or not channel or "/" in team or "/" in channel:
        return None
    return ChannelMessageRef(team, channel, message)


# Read, not run: Graph's chatMessage subscriptions offer created, updated and deleted; a reaction and an
# edit both arrive as ``updated``. Only ``created`` (or a change type we do not know) can bring a message.
_CHANGES_WITHOUT_NEW_MESSAGES = frozenset({"updated", "deleted"})


def may_bring_a_new_message(notification: ChangeNotification) -> bool:
    """False only for a change that cannot yield a new message (an edit, a reaction, a deletion), which
    therefore makes no hint that forces a read; an unknown or missing change type may (fail closed)."""
    kinds = {k.strip().lower() for k in (notification.change_type or "").split(",") if k.strip()}
    return not kinds or not kinds <= _CHANGES_WITHOUT_NEW_MESSAGES


def is_mail(notification: ChangeNotification) -> bool:
    return bool(_MAIL.search(notification.resource or ""))

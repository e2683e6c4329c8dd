"""Graph change-notification payloads, as the webhook receives them.

Read, not run here (no tenant): Microsoft Graph "Receive change notifications through webhooks" and
"Get change notifications for messages in Teams channels and chats". A POST carries
``{"value": [changeNotification, ...]}``; each item has ``subscriptionId``, ``changeType``,
``resource`` (for chat messages ``chats('{chat id}')/messages('{message id}')``; for mail
``Users/{id}/Messages/{id}``), ``resourceData`` (``id``, ``@odata.type``, ``@odata.id``),
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

"""What Graph returns, as typed models at the edge: chats, members, chat messages, mail, users.

Attributes are snake_case; each model is validated from Graph's camelCase JSON. Unknown JSON
fields are ignored (Graph adds properties over time). A field that is present but has the wrong
type, a missing required field, or a closed enum with a value we do not know makes the item
invalid; ``service.graph.pages`` skips such items instead of failing the whole page.
"""

from __future__ import annotations

from dataclasses import dataclass

from datetime import datetime, timezone
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel


def _as_utc(value: datetime) -> datetime:
    # Graph's timestamps are UTC; one without an offset must not become a naive datetime that
    # later fails to compare with a cursor.
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value


UtcDatetime = Annotated[datetime, AfterValidator(_as_utc)]


class GraphModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True, strict=False
    )


# Graph may add enum members, and shows the ones a client did not opt into (Prefer:
# include-unknown-enum-members) as "unknownFutureValue". A value outside these sets is a payload we
# do not understand, so the item is skipped rather than guessed at.
MessageType = Literal["message", "chatEvent", "typing", "systemEventMessage", "unknownFutureValue"]
ChatType = Literal["oneOnOne", "group", "meeting", "unknownFutureValue"]
BodyType = Literal["text", "html"]


class ItemBody(GraphModel):
    content_type: BodyType = "text"
    content: str = ""

    @field_validator("content_type", mode="before")
    @classmethod
    def _lower(cls, v: Any) -> Any:
        # Mail says "HTML"/"Text", Teams says "html"/"text": the same enum in two spellings.
        return v.lower() if isinstance(v, str) else v

    @field_validator("content", mode="before")
    @classmethod
    def _null_is_empty(cls, v: Any) -> Any:
        return "" if v is None else v


class MessageSender(GraphModel):
    """Who posted a chat message. Graph's identity set names a user, an application or a device."""

    kind: Literal["user", "application", "device"]
    id: str
    display_name: str | None = None
    # Graph keeps extending teamworkUserIdentityType; nothing here decides on it (the agent's own
    # messages are recognised by id), so a new value must not make a human's message unreadable.
    user_identity_type: str | None = None


def _sender_from_identity_set(value: Any) -> Any:
    """Graph's ``from`` ({"user": {...}} / {"application": {...}} / null) → MessageSender data."""
    if value is None or isinstance(value, MessageSender):
        return value
    if not isinstance(value, dict):
        return value  # let validation reject it
    for kind in ("user", "application", "device"):
        identity = value.get(kind)
        if identity is not None:
            if not isinstance(identity, dict):
                return identity
            return {"kind": kind, **identity}
    return None  # every member null: a system message has no sender


class ChatMessageAttachment(GraphModel):
    id: str | None = None
    content_type: str | None = None
    name: str | None = None
    content_url: str | None = None


class ChatMessage(GraphModel):
    id: str
    chat_id: str | None = None
    message_type: MessageType
    created_date_time: UtcDatetime
    last_modified_date_time: UtcDatetime | None = None
    deleted_date_time: UtcDatetime | None = None
    sender: MessageSender | None = Field(default=None, validation_alias="from")
    body: ItemBody = Field(default_factory=ItemBody)
    attachments: tuple[ChatMessageAttachment, ...] = ()
    reply_to_id: str | None = None

    @field_validator("sender", mode="before")
    @classmethod
    def _sender(cls, v: Any) -> Any:
        return _sender_from_identity_set(v)

    @field_validator("attachments", mode="before")
    @classmethod
    def _null_is_none(cls, v: Any) -> Any:
        return () if v is None else v

    @property
    def is_system(self) -> bool:
        """A system event (member added, topic changed…), not something a person or app wrote."""
        return self.message_type != "message" or self.sender is None

    @property
    def modified_or_created(self) -> datetime:
        """The time the lastModifiedDateTime cursor compares against."""
        return self.last_modified_date_time or self.created_date_time


class ChatMessagePreview(GraphModel):
    """Graph's chatMessageInfo: the newest message of a chat, as ``$expand=lastMessagePreview``."""

    id: str
    created_date_time: UtcDatetime | None = None
    # Informational only: a preview Graph describes in a new way must not hide its chat from discovery.
    message_type: str | None = None
    is_deleted: bool | None = None
    sender: MessageSender | None = Field(default=None, validation_alias="from")
    body: ItemBody = Field(default_factory=ItemBody)

    @field_validator("sender", mode="before")
    @classmethod
    def _sender(cls, v: Any) -> Any:
        return _sender_from_identity_set(v)


@dataclass(frozen=True)
class OutboundMention:
    """A person @mentioned in a message the agent posts: ``<at id="{id}">{text}</at>`` in its HTML."""

    id: int
    text: str
    user_id: str

    def to_graph(self) -> dict[str, Any]:
        # "Send chatMessage in a chat", example with mentions (read, not run): the user's identity type
        # is aadUser, and the tag's text must equal mentionText.
        return {
            "id": self.id,
            "mentionText": self.text,
            "mentioned": {"user": {"id": self.user_id, "userIdentityType": "aadUser"}},
        }


@dataclass(frozen=True)
class OutboundCard:
    """A card the agent posts: placed by ``<attachment id="{id}"></attachment>`` in the message's HTML."""

    id: str
    content_type: str
    content: str  # the card as a JSON string, as Graph takes it

    def to_graph(self) -> dict[str, Any]:
        return {"id": self.id, "contentType": self.content_type, "content": self.content}


@dataclass(frozen=True)
class OutboundFile:
    """A file the agent posts into a chat ("Send message with file attachment"): a "reference"
    attachment whose id is the GUID of the file's eTag, placed by ``<attachment id="{id}">``."""

    id: str
    content_url: str
    name: str

    def to_graph(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "contentType": "reference",
            "contentUrl": self.content_url,
            "name": self.name,
        }


OutboundAttachment = OutboundCard | OutboundFile


class HostedContent(GraphModel):
    """A chatMessageHostedContent as listed (an image pasted into a message); its bytes come separately."""

    id: str
    content_type: str | None = None


class ChatMember(GraphModel):
    """An aadUserConversationMember: ``id`` is the membership id, ``user_id`` the member's object id."""

    id: str
    user_id: str | None = None
    display_name: str | None = None
    email: str | None = None
    # The tenant the user belongs to (Graph v1.0, "aadUserConversationMember resource type": tenantId,
    # "TenantId which the Microsoft Entra user belongs to"); an external (federated) member's is their own.
    tenant_id: str | None = None
    roles: tuple[str, ...] = ()

    @field_validator("roles", mode="before")
    @classmethod
    def _null_is_none(cls, v: Any) -> Any:
        return () if v is None else v


class Chat(GraphModel):
    id: str
    topic: str | None = None
    chat_type: ChatType
    created_date_time: UtcDatetime | None = None
    last_updated_date_time: UtcDatetime | None = None
    members: tuple[ChatMember, ...] = ()
    last_message_preview: ChatMessagePreview | None = None

    @field_validator("members", mode="before")
    @classmethod
    def _null_is_none(cls, v: Any) -> Any:
        return () if v is None else v


class EmailAddress(GraphModel):
    address: str | None = None
    name: str | None = None


def _unwrap_recipient(value: Any) -> Any:
    """Graph's recipient is {"emailAddress": {...}}; the wrapper carries nothing else."""
    if isinstance(value, dict) and "emailAddress" in value:
        return value["emailAddress"]
    return value


class InternetMessageHeader(GraphModel):
    name: str
    value: str = ""


class MailMessage(GraphModel):
    id: str
    subject: str | None = None
    sender: EmailAddress | None = Field(default=None, validation_alias="from")
    to_recipients: tuple[EmailAddress, ...] = ()
    cc_recipients: tuple[EmailAddress, ...] = ()
    received_date_time: UtcDatetime
    body: ItemBody = Field(default_factory=ItemBody)
    body_preview: str = ""
    internet_message_id: str | None = None
    # RFC 5322 headers (Auto-Submitted, Precedence, List-Unsubscribe…); Graph returns them only when
    # $select names internetMessageHeaders (read, not run: Graph's message resource page).
    internet_message_headers: tuple[InternetMessageHeader, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _unwrap(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if "from" in data:
            data["from"] = _unwrap_recipient(data["from"])
        for name in ("toRecipients", "ccRecipients"):
            recipients = data.get(name)
            if recipients is None:
                data.pop(name, None)
            elif isinstance(recipients, list):
                data[name] = [_unwrap_recipient(r) for r in recipients]
        if data.get("bodyPreview") is None:
            data.pop("bodyPreview", None)
        if data.get("internetMessageHeaders") is None:
            data.pop("internetMessageHeaders", None)
        return data

    @classmethod
    def graph_select(cls) -> str:
        """The $select naming every property this model reads, so a $select (needed for the headers)
        drops none of them."""
        return ",".join(str(f.validation_alias or f.alias) for f in cls.model_fields.values())

    @property
    def headers(self) -> dict[str, str]:
        """The internet headers as name → value; a repeated name keeps every value, comma-joined (as
        RFC 9110 combines field lines), so no repeat can hide an ``Auto-Submitted`` behind another."""
        combined: dict[str, str] = {}
        for header in self.internet_message_headers:
            key = next((k for k in combined if k.lower() == header.name.lower()), header.name)
            combined[key] = f"{combined[key]}, {header.value}" if key in combined else header.value
        return combined

    @property
    def received_at(self) -> datetime:
        """The time the email ledger orders and claims by (its MailLike protocol)."""
        return self.received_date_time


class DirectoryObjectRef(GraphModel):
    """An item of a directoryObject collection as Graph lists it: the derived type and the id."""

    id: str
    odata_type: str | None = Field(default=None, alias="@odata.type")

    @property
    def is_user(self) -> bool:
        return self.odata_type == "#microsoft.graph.user"


class User(GraphModel):
    id: str
    display_name: str | None = None
    user_principal_name: str | None = None
    mail: str | None = None

"""Graph's JSON for each resource, rendered from the tenant state's dataclasses.

Shapes follow the v1.0 reference: a chatMessage's ``from.user`` carries the AAD object id and display
name but no UPN (clients must recognise the agent's own messages by object id), system messages have
``from: null`` and an ``eventDetail``, and evolvable enum members added after ``unknownFutureValue``
(``systemEventMessage``) read as ``unknownFutureValue`` unless the client sends
``Prefer: include-unknown-enum-members``.
"""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import quote

from emulator.seed import SeedUser
from emulator.state import Address, Chat, ChatMessage, MailMessage, Member, Reaction
from emulator.timestamps import outlook_time, teams_time

# chatMessageType members declared after unknownFutureValue in the v1.0 schema.
_EVOLVABLE_MESSAGE_TYPES = {"systemEventMessage"}
BEGINNING_OF_TIME = "0001-01-01T00:00:00Z"


def user(u: SeedUser) -> dict[str, Any]:
    return {
        "businessPhones": [],
        "displayName": u.display_name,
        "givenName": u.given_name,
        "jobTitle": u.job_title,
        "mail": u.address,
        "mobilePhone": None,
        "officeLocation": None,
        "preferredLanguage": "en-US",
        "surname": u.surname,
        "userPrincipalName": u.user_principal_name,
        "id": u.id,
    }


def _identity(user_id: str, display_name: str | None, tenant_id: str) -> dict[str, Any]:
    return {
        "@odata.type": "#microsoft.graph.teamworkUserIdentity",
        "id": user_id,
        "displayName": display_name,
        "userIdentityType": "aadUser",
        "tenantId": tenant_id,
    }


def message_type(m: ChatMessage, *, include_unknown_enum_members: bool) -> str:
    if m.message_type in _EVOLVABLE_MESSAGE_TYPES and not include_unknown_enum_members:
        return "unknownFutureValue"
    return m.message_type


def _sender(m: ChatMessage, tenant_id: str) -> dict[str, Any] | None:
    if m.sender is None:
        return None
    return {
        "application": None,
        "device": None,
        "user": _identity(m.sender.user_id, m.sender.display_name, tenant_id),
    }


def chat_message(
    m: ChatMessage, *, tenant_id: str, include_unknown_enum_members: bool
) -> dict[str, Any]:
    return {
        "id": m.id,
        "replyToId": None,
        "etag": str(int(m.last_modified.timestamp() * 1000)),
        "messageType": message_type(m, include_unknown_enum_members=include_unknown_enum_members),
        "createdDateTime": teams_time(m.created),
        "lastModifiedDateTime": teams_time(m.last_modified),
        "lastEditedDateTime": teams_time(m.last_edited) if m.last_edited else None,
        "deletedDateTime": teams_time(m.deleted) if m.deleted else None,
        "subject": None,
        "summary": None,
        "chatId": m.chat_id,
        "importance": "normal",
        "locale": "en-us",
        "webUrl": None,
        "channelIdentity": None,
        "policyViolation": None,
        "eventDetail": m.event_detail,
        "from": _sender(m, tenant_id),
        "body": {"contentType": m.content_type, "content": m.content},
        "attachments": [
            {
                "id": a.id,
                "contentType": a.content_type,
                "contentUrl": a.content_url,
                "content": a.content,
                "name": a.name,
                "thumbnailUrl": None,
                "teamsAppId": None,
            }
            for a in m.attachments
        ],
        "mentions": [
            {
                "id": x.id,
                "mentionText": x.text,
                "mentioned": {
                    "application": None,
                    "device": None,
                    "conversation": None,
                    "user": _identity(x.user_id, x.display_name, tenant_id),
                },
            }
            for x in m.mentions
        ],
        "reactions": [_reaction(r, tenant_id) for r in m.reactions],
        "messageHistory": [],
    }


def _reaction(r: Reaction, tenant_id: str) -> dict[str, Any]:
    """A chatMessageReaction (v1.0): who reacted sits under ``user.user``."""
    return {
        "reactionType": r.reaction_type,
        "displayName": None,
        "reactionContentUrl": None,
        "createdDateTime": teams_time(r.created),
        "user": {
            "application": None,
            "device": None,
            "user": _identity(r.user_id, None, tenant_id),
        },
    }


def message_preview(
    m: ChatMessage, *, tenant_id: str, include_unknown_enum_members: bool
) -> dict[str, Any]:
    """A chatMessageInfo, as lastMessagePreview expands to."""
    return {
        "id": m.id,
        "createdDateTime": teams_time(m.created),
        "isDeleted": m.deleted is not None,
        "messageType": message_type(m, include_unknown_enum_members=include_unknown_enum_members),
        "eventDetail": m.event_detail,
        "body": {"contentType": m.content_type, "content": m.content},
        "from": _sender(m, tenant_id),
    }


def member(chat_id: str, m: Member, tenant_id: str) -> dict[str, Any]:
    raw = f"0##{tenant_id}##{chat_id}##{m.user_id}".encode()
    return {
        "@odata.type": "#microsoft.graph.aadUserConversationMember",
        "id": base64.b64encode(raw).decode(),
        "roles": list(m.roles),
        "displayName": m.display_name,
        "visibleHistoryStartDateTime": teams_time(m.visible_history_start)
        if m.visible_history_start
        else BEGINNING_OF_TIME,
        "userId": m.user_id,
        "email": m.email,
        "tenantId": m.tenant_id,
    }


# The known issue Graph documents: $expand=members on a chat list returns at most 25 members.
EXPANDED_MEMBERS_LIMIT = 25


def chat(
    c: Chat,
    *,
    tenant_id: str,
    members: bool = False,
    members_limit: int | None = None,
    expand_preview: bool = False,
    preview: ChatMessage | None = None,
    include_unknown_enum_members: bool = False,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": c.id,
        "topic": c.topic,
        "createdDateTime": teams_time(c.created),
        "lastUpdatedDateTime": teams_time(c.last_updated),
        "chatType": c.chat_type,
        "webUrl": f"https://teams.microsoft.com/l/chat/{quote(c.id, safe='')}/0?tenantId={tenant_id}",
        "tenantId": tenant_id,
        "onlineMeetingInfo": None,
        "viewpoint": {"isHidden": False, "lastMessageReadDateTime": teams_time(c.created)},
    }
    if members:
        chosen = c.members if members_limit is None else c.members[:members_limit]
        body["members"] = [member(c.id, m, tenant_id) for m in chosen]
    if expand_preview:
        body["lastMessagePreview"] = (
            None
            if preview is None
            else message_preview(
                preview,
                tenant_id=tenant_id,
                include_unknown_enum_members=include_unknown_enum_members,
            )
        )
    return body


def _recipient(a: Address) -> dict[str, Any]:
    return {"emailAddress": {"name": a.name, "address": a.address}}


def mail_message(m: MailMessage, *, folder_id: str, headers: bool = False) -> dict[str, Any]:
    """Graph's message; ``headers``: with internetMessageHeaders, which Graph returns "only on applying
    a $select query option" (read, not run: the message resource page), as [{"name", "value"}]."""
    shape: dict[str, Any] = {
        "@odata.etag": f'W/"{m.change_key}"',
        "id": m.id,
        "createdDateTime": outlook_time(m.received),
        "lastModifiedDateTime": outlook_time(m.received),
        "changeKey": m.change_key,
        "categories": [],
        "receivedDateTime": outlook_time(m.received),
        "sentDateTime": outlook_time(m.sent),
        "hasAttachments": False,
        "internetMessageId": m.internet_message_id,
        "subject": m.subject,
        "bodyPreview": m.body_preview,
        "importance": "normal",
        "parentFolderId": folder_id,
        "conversationId": m.conversation_id,
        "conversationIndex": base64.b64encode(m.conversation_id.encode()[:22]).decode(),
        "isDeliveryReceiptRequested": False,
        "isReadReceiptRequested": False,
        "isRead": m.is_read,
        "isDraft": False,
        "webLink": f"https://outlook.office365.com/owa/?ItemID={quote(m.id, safe='')}&exvsurl=1"
        "&viewmodel=ReadMessageItem",
        "inferenceClassification": "focused",
        "body": {"contentType": m.content_type, "content": m.body},
        "sender": _recipient(m.sender),
        "from": _recipient(m.sender),
        "toRecipients": [_recipient(a) for a in m.to],
        "ccRecipients": [_recipient(a) for a in m.cc],
        "bccRecipients": [],
        "replyTo": [],
        "flag": {"flagStatus": "notFlagged"},
    }
    if headers:
        shape["internetMessageHeaders"] = [
            {"name": name, "value": value} for name, value in m.headers
        ]
    return shape


MAIL_PROPERTIES = frozenset(
    {
        "id",
        "createdDateTime",
        "lastModifiedDateTime",
        "changeKey",
        "categories",
        "receivedDateTime",
        "sentDateTime",
        "hasAttachments",
        "internetMessageId",
        "subject",
        "bodyPreview",
        "importance",
        "parentFolderId",
        "conversationId",
        "conversationIndex",
        "isDeliveryReceiptRequested",
        "isReadReceiptRequested",
        "isRead",
        "isDraft",
        "webLink",
        "inferenceClassification",
        "body",
        "sender",
        "from",
        "toRecipients",
        "ccRecipients",
        "bccRecipients",
        "replyTo",
        "flag",
        "internetMessageHeaders",
    }
)


def select(resource: dict[str, Any], fields: tuple[str, ...] | None) -> dict[str, Any]:
    """$select: the named properties, plus id and the etag Graph always returns."""
    if fields is None:
        return resource
    keep = {"id", "@odata.etag", *fields}
    return {k: v for k, v in resource.items() if k in keep}

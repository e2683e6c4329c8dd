"""Graph's JSON for teams, channels and channel messages, rendered from ``emulator.team_state``.

Read, not run (no tenant): "List joinedTeams" ("Currently, this API call returns only the id,
displayName, and description properties of a team"), "Get team" (team resource: createdDateTime,
displayName, description, internalId, classification, specialization, visibility, webUrl, isArchived,
tenantId, isMembershipLimitedToOwners), "List channels" and "Get channel" (channel resource: id,
createdDateTime, displayName, description, isFavoriteByDefault, email, tenantId, webUrl,
membershipType), and the channel message examples of "List channel messages", "List replies" and
"chatMessage: delta": the chatMessage shape of a chat, with ``chatId`` null, ``channelIdentity``,
``replyToId`` on a reply, a Teams ``webUrl`` naming the message and its parent, and on delta items an
``@odata.type`` of ``#microsoft.graph.chatMessage``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from emulator import shapes
from emulator.state import ChatMessage
from emulator.team_state import Channel, ChannelMessage, Team
from emulator.timestamps import teams_time

MESSAGE_TYPE = "#microsoft.graph.chatMessage"


def joined_team(t: Team) -> dict[str, Any]:
    return {"id": t.id, "displayName": t.display_name, "description": t.description}


def team(t: Team, tenant_id: str) -> dict[str, Any]:
    general = quote(f"19:{t.id}", safe="")
    return {
        "id": t.id,
        "createdDateTime": teams_time(t.created),
        "displayName": t.display_name,
        "description": t.description,
        "internalId": f"19:{t.id.replace('-', '')}@thread.tacv2",
        "classification": None,
        "specialization": "none",
        "visibility": "public",
        "webUrl": f"https://teams.microsoft.com/l/team/{general}/conversations?groupId={t.id}"
        f"&tenantId={tenant_id}",
        "isArchived": False,
        "tenantId": tenant_id,
        "isMembershipLimitedToOwners": False,
        "summary": None,
    }


def channel(c: Channel, tenant_id: str) -> dict[str, Any]:
    return {
        "id": c.id,
        "createdDateTime": teams_time(c.created),
        "displayName": c.display_name,
        "description": c.description,
        "isFavoriteByDefault": None,
        "email": None,
        "tenantId": tenant_id,
        "webUrl": f"https://teams.microsoft.com/l/channel/{quote(c.id, safe='')}/"
        f"{quote(c.display_name, safe='')}?groupId={c.team_id}&tenantId={tenant_id}",
        "membershipType": c.membership_type,
    }


def channel_message(m: ChannelMessage, tenant_id: str, *, typed: bool = False) -> dict[str, Any]:
    """A channel chatMessage: a chat message's shape (emulator.shapes) with ``chatId`` null, the
    channel's identity, ``replyToId`` and a channel ``webUrl``; ``typed`` adds ``@odata.type`` (delta
    items carry it)."""
    as_chat = ChatMessage(
        m.id,
        "",
        "message",
        m.created,
        m.last_modified,
        m.sender,
        m.content,
        m.content_type,
        mentions=m.mentions,
        attachments=m.attachments,
    )
    parent = m.reply_to_id or m.id
    body: dict[str, Any] = {"@odata.type": MESSAGE_TYPE} if typed else {}
    body.update(
        shapes.chat_message(as_chat, tenant_id=tenant_id, include_unknown_enum_members=True)
    )
    body.update(
        {
            "replyToId": m.reply_to_id,
            "subject": m.subject,
            "chatId": None,
            "webUrl": f"https://teams.microsoft.com/l/message/{quote(m.channel_id, safe='')}/{m.id}"
            f"?groupId={m.team_id}&tenantId={tenant_id}&createdTime={m.id}&parentMessageId={parent}",
            "channelIdentity": {"teamId": m.team_id, "channelId": m.channel_id},
        }
    )
    return body

"""The emulator's own controls for teams under /_emulator (unauthenticated, like the rest of the admin
API): add a team, add a channel to a team after start (a client must discover it), add or remove a team
member, and post a channel root message or a reply as any team member, so tests can play people.
"""

from __future__ import annotations

import html
from typing import Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from emulator import team_shapes
from emulator.context import context_of
from emulator.routes_admin import _time
from emulator.state import Mention, StateError
from emulator.team_seed import MembershipType

router = APIRouter(prefix="/_emulator")


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class InjectTeam(_Body):
    display_name: str = Field(min_length=1)
    members: list[str]  # user ids or UPNs
    owners: list[str] = []
    description: str | None = None
    id: str | None = None


class InjectChannel(_Body):
    display_name: str = Field(min_length=1)
    membership_type: MembershipType = "standard"
    members: list[str] = []  # a private channel's members
    description: str | None = None
    id: str | None = None


class TeamMemberToAdd(_Body):
    user: str  # id or UPN
    owner: bool = False


class InjectChannelMessage(_Body):
    from_user: str  # id or UPN of a team member
    content: str = Field(min_length=1)
    content_type: Literal["text", "html"] = "text"
    created: str | None = None  # ISO-8601 or relative ("-2h")
    subject: str | None = None  # a root's subject line
    # Users (id or UPN) the message @mentions: each becomes <at id="N">name</at> before the content,
    # as a person typing "@name" in Teams makes it (the body turns HTML).
    mentions: list[str] = Field(default_factory=list)


@router.post("/teams", status_code=201)
async def inject_team(body: InjectTeam, request: Request) -> JSONResponse:
    ctx = context_of(request)
    team = ctx.state.teams.add_team(
        body.display_name,
        body.members,
        owners=body.owners,
        description=body.description,
        team_id=body.id,
    )
    return JSONResponse(team_shapes.team(team, ctx.seed.tenant_id), status_code=201)


@router.post("/teams/{team_id}/channels", status_code=201)
async def inject_channel(team_id: str, body: InjectChannel, request: Request) -> JSONResponse:
    ctx = context_of(request)
    channel = ctx.state.teams.add_channel(
        team_id,
        body.display_name,
        membership_type=body.membership_type,
        members=body.members,
        description=body.description,
        channel_id=body.id,
    )
    return JSONResponse(team_shapes.channel(channel, ctx.seed.tenant_id), status_code=201)


@router.post("/teams/{team_id}/members", status_code=201)
async def add_team_member(team_id: str, body: TeamMemberToAdd, request: Request) -> dict[str, str]:
    member = context_of(request).state.teams.add_member(team_id, body.user, owner=body.owner)
    return {"added": member.user_id}


@router.delete("/teams/{team_id}/members/{user}")
async def remove_team_member(team_id: str, user: str, request: Request) -> dict[str, str]:
    context_of(request).state.teams.remove_member(team_id, user)
    return {"removed": user}


@router.post("/teams/{team_id}/channels/{channel_id}/messages", status_code=201)
async def inject_channel_message(
    team_id: str, channel_id: str, body: InjectChannelMessage, request: Request
) -> JSONResponse:
    return _post(request, team_id, channel_id, None, body)


@router.post(
    "/teams/{team_id}/channels/{channel_id}/messages/{message_id}/replies", status_code=201
)
async def inject_reply(
    team_id: str, channel_id: str, message_id: str, body: InjectChannelMessage, request: Request
) -> JSONResponse:
    return _post(request, team_id, channel_id, message_id, body)


def _post(
    request: Request,
    team_id: str,
    channel_id: str,
    root_id: str | None,
    body: InjectChannelMessage,
) -> JSONResponse:
    ctx = context_of(request)
    mentions = []
    for who in body.mentions:
        user = ctx.seed.find_user(who)
        if user is None:
            raise StateError("not_found", f"No user '{who}' to mention.")
        mentions.append(user)
    tagged = [
        Mention(i, u.display_name or u.id, u.id, u.display_name) for i, u in enumerate(mentions)
    ]
    content, content_type = body.content, body.content_type
    if tagged:
        # The content is the person's text: escaped into the HTML the mentions need.
        text = content if content_type == "html" else html.escape(content)
        content = " ".join(f'<at id="{m.id}">{html.escape(m.text)}</at>' for m in tagged)
        content, content_type = f"{content} {text}", "html"
    message = ctx.state.teams.post(
        team_id,
        channel_id,
        sender_id=body.from_user,
        content=content,
        content_type=content_type,
        reply_to_id=root_id,
        created=_time(body.created, ctx),
        mentions=tagged,
        subject=body.subject,
    )
    return JSONResponse(team_shapes.channel_message(message, ctx.seed.tenant_id), status_code=201)

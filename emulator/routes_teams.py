"""Graph v1.0 teams and channels: the signed-in user's joined teams, a team, its channels (and
allChannels), one channel. Permissions in ``emulator.team_permissions``, shapes in
``emulator.team_shapes``; what Graph documents for each route is cited there.

A caller who is not a member of the team gets 403 Forbidden, and private channels are hidden from
non-members in lists and 403 on a get (read, not run: "List channels" says non-members "can't see"
them; the status Graph answers a direct get with is not documented).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from emulator import team_shapes
from emulator.context import context_of
from emulator.errors import bad_request, forbidden
from emulator.graph_auth import Caller, graph_caller
from emulator.odata import query_options
from emulator.team_permissions import (
    CHANNEL_READ_APPLICATION,
    CHANNEL_READ_DELEGATED,
    JOINED_TEAMS,
    TEAM_READ_APPLICATION,
    TEAM_READ_DELEGATED,
)

router = APIRouter(prefix="/v1.0")


@router.get("/me/joinedTeams")
async def my_joined_teams(
    request: Request, caller: Caller = Depends(graph_caller("teams"))
) -> JSONResponse:
    return _joined(request, caller, caller.me())


@router.get("/users/{user_ref}/joinedTeams")
async def joined_teams(
    user_ref: str, request: Request, caller: Caller = Depends(graph_caller("teams"))
) -> JSONResponse:
    user = context_of(request).seed.find_user(user_ref)
    if user is None:
        raise bad_request(f"Invalid user '{user_ref}': no such user in the tenant.")
    if caller.user_id is not None and caller.user_id != user.id:
        raise forbidden(
            "With delegated permissions, List joinedTeams works only for the signed-in user (me)."
        )
    return _joined(request, caller, user.id)


def _joined(request: Request, caller: Caller, user_id: str) -> JSONResponse:
    ctx = context_of(request)
    caller.require(JOINED_TEAMS, JOINED_TEAMS)
    query_options(request.query_params.multi_items(), set())  # "does not support" query options
    value = [team_shapes.joined_team(t) for t in ctx.state.teams.teams_of(user_id)]
    return JSONResponse(
        {
            "@odata.context": ctx.odata_context(request, "teams"),
            "@odata.count": len(value),
            "value": value,
        }
    )


@router.get("/teams/{team_id}")
async def get_team(
    team_id: str, request: Request, caller: Caller = Depends(graph_caller("teams"))
) -> JSONResponse:
    ctx = context_of(request)
    caller.require(TEAM_READ_DELEGATED, TEAM_READ_APPLICATION)
    team = ctx.state.teams.team(team_id, caller.user_id)
    return JSONResponse(
        {
            "@odata.context": ctx.odata_context(request, "teams", entity=True),
            **team_shapes.team(team, ctx.seed.tenant_id),
        }
    )


@router.get("/teams/{team_id}/channels")
@router.get("/teams/{team_id}/allChannels")
async def list_channels(
    team_id: str, request: Request, caller: Caller = Depends(graph_caller("team_channels"))
) -> JSONResponse:
    ctx = context_of(request)
    caller.require(CHANNEL_READ_DELEGATED, CHANNEL_READ_APPLICATION)
    navigation = request.url.path.rsplit("/", 1)[-1]
    options = query_options(request.query_params.multi_items(), {"$filter", "$select"})
    channels = ctx.state.teams.channels(team_id, caller.user_id)
    if "$filter" in options:
        wanted = _membership_filter(options["$filter"])
        channels = [c for c in channels if c.membership_type == wanted]
    value: list[dict[str, Any]] = []
    for c in channels:
        item = team_shapes.channel(c, ctx.seed.tenant_id)
        if navigation == "allChannels":  # "The response also includes the @odata.id property"
            item = {
                "@odata.id": f"{ctx.graph_base(request)}/teams('{team_id}')/channels('{c.id}')"
            } | item
        value.append(item)
    return JSONResponse(
        {
            "@odata.context": ctx.odata_context(request, "teams", team_id, navigation),
            "@odata.count": len(value),
            "value": value,
        }
    )


@router.get("/teams/{team_id}/channels/{channel_id}")
async def get_channel(
    team_id: str,
    channel_id: str,
    request: Request,
    caller: Caller = Depends(graph_caller("teams")),
) -> JSONResponse:
    ctx = context_of(request)
    caller.require(CHANNEL_READ_DELEGATED, CHANNEL_READ_APPLICATION)
    channel = ctx.state.teams.channel(team_id, channel_id, caller.user_id)
    return JSONResponse(
        {
            "@odata.context": ctx.odata_context(request, "teams", team_id, "channels", entity=True),
            **team_shapes.channel(channel, ctx.seed.tenant_id),
        }
    )


def _membership_filter(text: str) -> str:
    """The one $filter modelled: membershipType eq 'standard' | 'private' (as "List channels" example 2)."""
    prefix = "membershiptype eq '"
    lowered = text.strip().lower()
    if not lowered.startswith(prefix) or not lowered.endswith("'"):
        raise bad_request(
            f"Invalid filter clause: '{text}'. Channels can be filtered with membershipType eq '…'."
        )
    return lowered[len(prefix) : -1]

"""Graph v1.0 channel messages: list a channel's root messages (``$expand=replies``), get one, list and
get its replies, post a root message or a reply as the signed-in user, and the channel's delta.

Read, not run (no tenant): "List channel messages" ("Retrieve the list of messages (without the
replies) in a channel"), "Get chatMessage in a channel or chat", "List replies", "Get a reply",
"Send chatMessage in a channel", "Reply to a message in a channel" (201 Created with the message) and
"chatMessage: delta" (rules in ``emulator.channel_queries``, the reply-touch decision in
``emulator.team_state``). The order of a listing is not documented: roots come most recently modified
first, as chat messages do; replies newest first; delta in the order they last changed, oldest first,
as the delta page's examples read. Mentions and cards on a new message are checked as a chat
message's are (``emulator.routes_messages``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from emulator import team_shapes
from emulator.bodies import json_object
from emulator.channel_queries import (
    MAX_EXPANDED_REPLIES,
    PageQuery,
    page_token,
    parse_delta_query,
    parse_messages_query,
)
from emulator.context import EmulatorContext, context_of
from emulator.errors import forbidden
from emulator.graph_auth import Caller, graph_caller
from emulator.odata import query_options
from emulator.paging import next_link
from emulator.routes_drives_admin import file_reference
from emulator.routes_messages import _cards, _mentions, _message_body
from emulator.team_permissions import (
    APP_ONLY_NOT_SUPPORTED,
    MESSAGE_READ_APPLICATION,
    MESSAGE_READ_DELEGATED,
    MESSAGE_SEND_DELEGATED,
)
from emulator.team_state import ChannelMessage
from emulator.timestamps import epoch_ms

router = APIRouter(prefix="/v1.0")
_CHANNEL = "/teams/{team_id}/channels/{channel_id}"
_READ = graph_caller("channel_messages")


def _readable(request: Request, caller: Caller, team_id: str, channel_id: str) -> EmulatorContext:
    ctx = context_of(request)
    caller.require(MESSAGE_READ_DELEGATED, MESSAGE_READ_APPLICATION)
    ctx.state.teams.channel(team_id, channel_id, caller.user_id)
    return ctx


def _us(m: ChannelMessage, *, created: bool = False) -> int:
    return epoch_ms(m.created if created else m.last_modified) * 1000


def _with_replies(
    ctx: EmulatorContext, request: Request, root: ChannelMessage, expand: bool, typed: bool = False
) -> dict[str, Any]:
    tenant = ctx.seed.tenant_id
    if not expand:
        return team_shapes.channel_message(root, tenant, typed=typed)
    replies = sorted(
        ctx.state.teams.replies(root.team_id, root.channel_id, root.id),
        key=lambda r: (_us(r, created=True), int(r.id)),
        reverse=True,
    )[:MAX_EXPANDED_REPLIES]
    context = ctx.odata_context(
        request,
        "teams",
        root.team_id,
        f"channels('{root.channel_id}')/messages('{root.id}')/replies",
    )
    shaped = team_shapes.channel_message(root, tenant, typed=typed)
    shaped["replies@odata.context"] = context
    shaped["replies"] = [team_shapes.channel_message(r, tenant) for r in replies]
    return shaped


@router.get(_CHANNEL + "/messages/delta")
@router.get(_CHANNEL + "/messages/delta()")  # the function-call form Microsoft's Graph SDK sends
async def delta(
    team_id: str, channel_id: str, request: Request, caller: Caller = Depends(_READ)
) -> JSONResponse:
    ctx = _readable(request, caller, team_id, channel_id)
    query = parse_delta_query(channel_id, request.query_params.multi_items())
    upto = query.upto_version if query.upto_version is not None else ctx.state.teams.version()
    changed = sorted(
        (
            m
            for m in ctx.state.teams.roots(team_id, channel_id)
            if query.after_version < m.version <= upto
            and (query.since_us is None or _us(m) > query.since_us)
        ),
        key=lambda m: m.version,
    )
    page = changed[: query.top]
    body: dict[str, Any] = {
        "@odata.context": f"{ctx.graph_base(request)}/$metadata#Collection(chatMessage)"
    }
    base = f"{ctx.graph_base(request)}/teams/{team_id}/channels/{channel_id}/messages/delta"
    if len(changed) > len(page):
        body["@odata.nextLink"] = next_link(
            base, [], "$skiptoken", query.next_token(page[-1].version, upto)
        )
    else:
        body["@odata.deltaLink"] = next_link(base, [], "$deltatoken", query.delta_token(upto))
    body["value"] = [_with_replies(ctx, request, m, query.expand_replies, typed=True) for m in page]
    return JSONResponse(body)


def _newest_first_page(
    ctx: EmulatorContext,
    request: Request,
    messages: list[ChannelMessage],
    *,
    replies: bool,
    team_id: str,
    path: str,
    link: str,
    shape: Callable[[ChannelMessage, PageQuery], dict[str, Any]],
) -> JSONResponse:
    """One page of a channel's roots (by last activity) or of a thread's replies (by creation),
    newest first, with Graph's count and a ``$skiptoken`` link when more follow. ``path``: the
    collection below ``teams('{team_id}')`` as the context names it; ``link``: as a URL path."""
    query = parse_messages_query(request.query_params.multi_items(), replies=replies)

    def key(m: ChannelMessage) -> tuple[int, int]:
        return (_us(m, created=replies), int(m.id))

    ordered = sorted(messages, key=key, reverse=True)
    if query.cursor is not None:
        ordered = [m for m in ordered if key(m) < query.cursor]
    page = ordered[: query.top]
    body: dict[str, Any] = {
        "@odata.context": ctx.odata_context(request, "teams", team_id, path),
        "@odata.count": len(page),
        "value": [shape(m, query) for m in page],
    }
    if len(ordered) > len(page):
        last = page[-1]
        body["@odata.nextLink"] = next_link(
            f"{ctx.graph_base(request)}/teams/{team_id}/{link}",
            request.query_params.multi_items(),
            "$skiptoken",
            page_token(replies=replies, key=_us(last, created=replies), message_id=last.id),
        )
    return JSONResponse(body)


@router.get(_CHANNEL + "/messages")
async def list_messages(
    team_id: str, channel_id: str, request: Request, caller: Caller = Depends(_READ)
) -> JSONResponse:
    ctx = _readable(request, caller, team_id, channel_id)
    return _newest_first_page(
        ctx,
        request,
        list(ctx.state.teams.roots(team_id, channel_id)),
        replies=False,
        team_id=team_id,
        path=f"channels('{channel_id}')/messages",
        link=f"channels/{channel_id}/messages",
        shape=lambda m, query: _with_replies(ctx, request, m, query.expand_replies),
    )


@router.get(_CHANNEL + "/messages/{message_id}")
async def get_message(
    team_id: str,
    channel_id: str,
    message_id: str,
    request: Request,
    caller: Caller = Depends(_READ),
) -> JSONResponse:
    ctx = _readable(request, caller, team_id, channel_id)
    query_options(request.query_params.multi_items(), set())
    message = ctx.state.teams.root(team_id, channel_id, message_id)
    context = ctx.odata_context(
        request, "teams", team_id, f"channels('{channel_id}')/messages", entity=True
    )
    return JSONResponse(
        {"@odata.context": context, **team_shapes.channel_message(message, ctx.seed.tenant_id)}
    )


@router.get(_CHANNEL + "/messages/{message_id}/replies")
async def list_replies(
    team_id: str,
    channel_id: str,
    message_id: str,
    request: Request,
    caller: Caller = Depends(_READ),
) -> JSONResponse:
    ctx = _readable(request, caller, team_id, channel_id)
    return _newest_first_page(
        ctx,
        request,
        list(ctx.state.teams.replies(team_id, channel_id, message_id)),
        replies=True,
        team_id=team_id,
        path=f"channels('{channel_id}')/messages('{message_id}')/replies",
        link=f"channels/{channel_id}/messages/{message_id}/replies",
        shape=lambda m, _: team_shapes.channel_message(m, ctx.seed.tenant_id),
    )


@router.get(_CHANNEL + "/messages/{message_id}/replies/{reply_id}")
async def get_reply(
    team_id: str,
    channel_id: str,
    message_id: str,
    reply_id: str,
    request: Request,
    caller: Caller = Depends(_READ),
) -> JSONResponse:
    ctx = _readable(request, caller, team_id, channel_id)
    query_options(request.query_params.multi_items(), set())
    reply = ctx.state.teams.reply(team_id, channel_id, message_id, reply_id)
    context = ctx.odata_context(
        request,
        "teams",
        team_id,
        f"channels('{channel_id}')/messages('{message_id}')/replies",
        entity=True,
    )
    return JSONResponse(
        {"@odata.context": context, **team_shapes.channel_message(reply, ctx.seed.tenant_id)}
    )


@router.post(_CHANNEL + "/messages", status_code=201)
async def post_message(
    team_id: str, channel_id: str, request: Request, caller: Caller = Depends(_READ)
) -> JSONResponse:
    return await _post(request, caller, team_id, channel_id, None)


@router.post(_CHANNEL + "/messages/{message_id}/replies", status_code=201)
async def post_reply(
    team_id: str,
    channel_id: str,
    message_id: str,
    request: Request,
    caller: Caller = Depends(_READ),
) -> JSONResponse:
    return await _post(request, caller, team_id, channel_id, message_id)


async def _post(
    request: Request, caller: Caller, team_id: str, channel_id: str, root_id: str | None
) -> JSONResponse:
    ctx = context_of(request)
    if caller.user_id is None:
        raise forbidden(APP_ONLY_NOT_SUPPORTED)
    caller.require(MESSAGE_SEND_DELEGATED)
    body = await json_object(request)
    content, content_type = _message_body(body)
    ctx.state.teams.channel(team_id, channel_id, caller.user_id)
    message = ctx.state.teams.post(
        team_id,
        channel_id,
        sender_id=caller.user_id,
        content=content,
        content_type=content_type,  # type: ignore[arg-type]
        reply_to_id=root_id,
        mentions=_mentions(ctx, body.get("mentions"), content, content_type),
        attachments=_cards(
            body.get("attachments"),
            content,
            content_type,
            file_reference(request, caller.user_id),
        ),
    )
    where = f"channels('{channel_id}')/messages" + (f"('{root_id}')/replies" if root_id else "")
    context = ctx.odata_context(request, "teams", team_id, where, entity=True)
    return JSONResponse(
        {"@odata.context": context, **team_shapes.channel_message(message, ctx.seed.tenant_id)},
        status_code=201,
    )

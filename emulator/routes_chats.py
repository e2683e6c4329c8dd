"""Graph v1.0 chats: list the signed-in user's chats, create one, get one, and its members."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from emulator import shapes
from emulator.bodies import json_object
from emulator.context import EmulatorContext, context_of
from emulator.errors import bad_request
from emulator.graph_auth import Caller, graph_caller, include_unknown_enum_members
from emulator.odata import encode_token, parse_chats_query, query_options
from emulator.paging import next_link
from emulator.state import Chat
from emulator.timestamps import epoch_ms, parse_iso

router = APIRouter(prefix="/v1.0")
CHAT_READ = {"Chat.ReadBasic", "Chat.Read", "Chat.ReadWrite"}
CHAT_READ_ALL = {"Chat.ReadBasic.All", "Chat.Read.All", "Chat.ReadWrite.All"}
MEMBER_TYPE = "#microsoft.graph.aadUserConversationMember"
_BIND = re.compile(r"users(?:\('([^']+)'\)|/([^/?#]+))/?$")


@router.get("/me/chats")
@router.get("/chats")
async def list_chats(
    request: Request, caller: Caller = Depends(graph_caller("chats"))
) -> JSONResponse:
    ctx = context_of(request)
    user_id = caller.me()
    caller.require(CHAT_READ)
    query = parse_chats_query(request.query_params.multi_items())
    if query.by_last_message and ctx.seed.chats_orderby == "refused":
        # Some tenants refuse the documented ordering (SPEC §9); the seed plays one of them.
        raise bad_request(
            "QueryOptions to order by 'lastMessagePreview/createdDateTime' is not supported."
        )
    chats = ctx.state.chats_of(user_id)
    if query.chat_type is not None:
        chats = [c for c in chats if c.chat_type == query.chat_type]
    key = _by_last_message(ctx) if query.by_last_message else _us
    # Most recent first; a chat that moves while a client pages may be seen twice or not at all in
    # that sweep, as with Graph.
    ordered = sorted(chats, key=lambda c: (key(c), c.id), reverse=True)
    if query.cursor is not None:
        ordered = [c for c in ordered if (key(c), c.id) < query.cursor]
    page = ordered[: query.top]
    prefer_all = include_unknown_enum_members(request)
    value = [
        shapes.chat(
            c,
            tenant_id=ctx.seed.tenant_id,
            members="members" in query.expand,
            members_limit=shapes.EXPANDED_MEMBERS_LIMIT,
            expand_preview="lastMessagePreview" in query.expand,
            preview=ctx.state.last_message(c.id) if "lastMessagePreview" in query.expand else None,
            include_unknown_enum_members=prefer_all,
        )
        for c in page
    ]
    body: dict[str, Any] = {
        "@odata.context": ctx.odata_context(request, "chats"),
        "@odata.count": len(value),
        "value": value,
    }
    if len(ordered) > len(page):
        last = page[-1]
        token = encode_token(
            {
                "kind": "chats",
                "key": key(last),
                "id": last.id,
                "by_last_message": query.by_last_message,
            }
        )
        body["@odata.nextLink"] = next_link(
            f"{ctx.graph_base(request)}{request.url.path[len('/v1.0') :]}",
            request.query_params.multi_items(),
            "$skiptoken",
            token,
        )
    return JSONResponse(body)


@router.post("/chats", status_code=201)
async def create_chat(
    request: Request, caller: Caller = Depends(graph_caller("other"))
) -> JSONResponse:
    ctx = context_of(request)
    user_id = caller.me()
    caller.require({"Chat.Create", "Chat.ReadWrite"})
    body = await json_object(request)
    chat_type = body.get("chatType")
    if chat_type not in ("oneOnOne", "group"):
        raise bad_request(f"Invalid chatType '{chat_type}': create a 'oneOnOne' or a 'group' chat.")
    members = body.get("members")
    if not isinstance(members, list) or not members:
        raise bad_request("The request must list the chat's members, the caller included.")
    member_ids = [_bound_user(ctx, m) for m in members]
    if user_id not in member_ids:
        raise bad_request("The members list must include the caller (the signed-in user).")
    topic = body.get("topic")
    if topic is not None and not isinstance(topic, str):
        raise bad_request("topic must be a string.")
    chat, _ = ctx.state.create_chat(chat_type, member_ids, topic=topic, initiator=user_id)
    return JSONResponse(
        {
            "@odata.context": ctx.odata_context(request, "chats", entity=True),
            **shapes.chat(chat, tenant_id=ctx.seed.tenant_id),
        },
        status_code=201,
    )


@router.get("/chats/{chat_id}")
@router.get("/me/chats/{chat_id}")
async def get_chat(
    chat_id: str, request: Request, caller: Caller = Depends(graph_caller("chats"))
) -> JSONResponse:
    ctx = context_of(request)
    chat = _readable(request, caller, chat_id)
    options = query_options(request.query_params.multi_items(), {"$expand"})
    expand = {x.strip().lower() for x in options.get("$expand", "").split(",") if x.strip()}
    if expand - {"members"}:
        raise bad_request(
            f"Parsing OData Select and Expand failed: Could not find a property named "
            f"'{sorted(expand - {'members'})[0]}' on type 'microsoft.graph.chat'."
        )
    return JSONResponse(
        {
            "@odata.context": ctx.odata_context(request, "chats", entity=True),
            **shapes.chat(chat, tenant_id=ctx.seed.tenant_id, members="members" in expand),
        }
    )


@router.get("/chats/{chat_id}/members")
async def list_members(
    chat_id: str, request: Request, caller: Caller = Depends(graph_caller("other"))
) -> JSONResponse:
    ctx = context_of(request)
    chat = _readable(
        request, caller, chat_id, extra_scopes={"ChatMember.Read", "ChatMember.ReadWrite"}
    )
    value = [shapes.member(chat.id, m, ctx.seed.tenant_id) for m in chat.members]
    return JSONResponse(
        {
            "@odata.context": ctx.odata_context(request, "chats", chat.id, "members"),
            "@odata.count": len(value),
            "value": value,
        }
    )


@router.post("/chats/{chat_id}/members", status_code=201)
async def add_member(
    chat_id: str, request: Request, caller: Caller = Depends(graph_caller("other"))
) -> JSONResponse:
    ctx = context_of(request)
    user_id = caller.me()
    caller.require({"ChatMember.ReadWrite", "Chat.ReadWrite"})
    ctx.state.readable_chat(chat_id, user_id)
    body = await json_object(request)
    new_member = _bound_user(ctx, body)
    visible = body.get("visibleHistoryStartDateTime")
    try:
        since = (
            parse_iso(visible)
            if isinstance(visible, str) and not visible.startswith("0001-")
            else None
        )
    except ValueError:
        raise bad_request(
            f"visibleHistoryStartDateTime '{visible}' is not an ISO-8601 instant."
        ) from None
    member = ctx.state.add_member(
        chat_id, new_member, initiator=user_id, visible_history_start=since
    )
    return JSONResponse(
        {
            "@odata.context": ctx.odata_context(request, "chats", chat_id, "members", entity=True),
            **shapes.member(chat_id, member, ctx.seed.tenant_id),
        },
        status_code=201,
    )


def _readable(
    request: Request, caller: Caller, chat_id: str, extra_scopes: set[str] | None = None
) -> Chat:
    caller.require(CHAT_READ | (extra_scopes or set()), CHAT_READ_ALL)
    return context_of(request).state.readable_chat(chat_id, caller.user_id)


def _us(chat: Chat) -> int:
    return epoch_ms(chat.last_updated) * 1000


def _by_last_message(ctx: EmulatorContext) -> Callable[[Chat], int]:
    """The newest message's createdDateTime (system events included: they are messages too, and Graph's
    lastMessagePreview shows them); a chat without messages sorts last, as null does in a descending order."""

    def key(chat: Chat) -> int:
        last = ctx.state.last_message(chat.id)
        return -1 if last is None else epoch_ms(last.created) * 1000

    return key


def _bound_user(ctx: EmulatorContext, member: object) -> str:
    if not isinstance(member, dict):
        raise bad_request("Each member must be an object of type aadUserConversationMember.")
    if member.get("@odata.type") != MEMBER_TYPE:
        raise bad_request(f"Member @odata.type must be '{MEMBER_TYPE}'.")
    roles = member.get("roles")
    if not isinstance(roles, list) or any(r not in ("owner", "guest") for r in roles):
        raise bad_request('Each member needs roles: ["owner"] (or ["guest"]).')
    bind = member.get("user@odata.bind")
    match = _BIND.search(bind) if isinstance(bind, str) else None
    if match is None:
        raise bad_request(
            "Each member needs user@odata.bind, e.g. "
            "\"https://graph.microsoft.com/v1.0/users('<user id or UPN>')\"."
        )
    ref = match.group(1) or match.group(2)
    user = ctx.seed.find_user(ref)
    if user is None:
        raise bad_request(f"Invalid user '{ref}' in user@odata.bind: no such user in the tenant.")
    return user.id

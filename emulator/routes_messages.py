"""Graph v1.0 chat messages: list a chat's messages with Graph's query rules, get one, and post one."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from emulator import shapes
from emulator.bodies import json_object
from emulator.context import context_of
from emulator.errors import bad_request, not_found
from emulator.graph_auth import Caller, graph_caller, include_unknown_enum_members
from emulator.odata import encode_token, parse_chat_messages_query
from emulator.paging import next_link
from emulator.routes_chats import CHAT_READ_ALL
from emulator.state import ChatMessage
from emulator.timestamps import epoch_ms

router = APIRouter(prefix="/v1.0")
MESSAGE_READ = {"Chat.Read", "Chat.ReadWrite"}


@router.get("/chats/{chat_id}/messages")
@router.get("/me/chats/{chat_id}/messages")
async def list_messages(chat_id: str, request: Request,
                        caller: Caller = Depends(graph_caller("chat_messages"))) -> JSONResponse:
    ctx = context_of(request)
    caller.require(MESSAGE_READ, CHAT_READ_ALL)
    query = parse_chat_messages_query(request.query_params.multi_items())
    ctx.state.readable_chat(chat_id, caller.user_id)

    def key(m: ChatMessage) -> tuple[int, int]:
        at = m.last_modified if query.order == "lastModifiedDateTime" else m.created
        return epoch_ms(at) * 1000, int(m.id)

    items = [
        m for m in ctx.state.messages(chat_id)
        if (query.after_us is None or key(m)[0] > query.after_us)
        and (query.before_us is None or key(m)[0] < query.before_us)
        and (query.cursor is None or key(m) < query.cursor)
    ]
    items.sort(key=key, reverse=True)
    page = items[: query.top]
    prefer_all = include_unknown_enum_members(request)
    value = [shapes.chat_message(m, tenant_id=ctx.seed.tenant_id, include_unknown_enum_members=prefer_all)
             for m in page]
    body: dict[str, Any] = {
        "@odata.context": ctx.odata_context(request, "chats", chat_id, "messages"),
        "@odata.count": len(value), "value": value,
    }
    if len(items) > len(page):
        last_key = key(page[-1])
        token = encode_token({"kind": "chatMessages", "order": query.order, "key": last_key[0], "id": last_key[1]})
        body["@odata.nextLink"] = next_link(f"{ctx.graph_base(request)}/chats/{chat_id}/messages",
                                            request.query_params.multi_items(), "$skiptoken", token)
    return JSONResponse(body)


@router.get("/chats/{chat_id}/messages/{message_id}")
async def get_message(chat_id: str, message_id: str, request: Request,
                      caller: Caller = Depends(graph_caller("chat_messages"))) -> JSONResponse:
    ctx = context_of(request)
    caller.require(MESSAGE_READ, CHAT_READ_ALL)
    ctx.state.readable_chat(chat_id, caller.user_id)
    message = next((m for m in ctx.state.messages(chat_id) if m.id == message_id), None)
    if message is None:
        raise not_found(f"Message '{message_id}' was not found in chat '{chat_id}'.")
    return JSONResponse({"@odata.context": ctx.odata_context(request, "chats", chat_id, "messages", entity=True),
                         **shapes.chat_message(message, tenant_id=ctx.seed.tenant_id,
                                               include_unknown_enum_members=include_unknown_enum_members(request))})


@router.post("/chats/{chat_id}/messages", status_code=201)
async def post_message(chat_id: str, request: Request,
                       caller: Caller = Depends(graph_caller("chat_messages"))) -> JSONResponse:
    ctx = context_of(request)
    user_id = caller.me()
    caller.require({"ChatMessage.Send", "Chat.ReadWrite"})
    body = await json_object(request)
    item = body.get("body")
    if not isinstance(item, dict) or not isinstance(item.get("content"), str) or not item["content"].strip():
        raise bad_request("Missing body content: send {\"body\": {\"contentType\": \"text\", \"content\": \"...\"}}.")
    content_type = str(item.get("contentType", "text")).lower()
    if content_type not in ("text", "html"):
        raise bad_request(f"Invalid contentType '{item.get('contentType')}': use 'text' or 'html'.")
    ctx.state.readable_chat(chat_id, user_id)
    message = ctx.state.post_message(chat_id, sender_id=user_id, content=item["content"],
                                     content_type=content_type)  # type: ignore[arg-type]
    return JSONResponse({"@odata.context": ctx.odata_context(request, "chats", chat_id, "messages", entity=True),
                         **shapes.chat_message(message, tenant_id=ctx.seed.tenant_id,
                                               include_unknown_enum_members=include_unknown_enum_members(request))},
                        status_code=201)

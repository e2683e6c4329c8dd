"""Graph v1.0 chat messages: list a chat's messages with Graph's query rules, get one, post one,
update or soft-delete one's own, and set or unset the signed-in user's reaction to one."""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from emulator import shapes
from emulator.bodies import json_object
from emulator.context import EmulatorContext, context_of
from emulator.errors import bad_request, forbidden, not_found
from emulator.graph_auth import Caller, graph_caller, include_unknown_enum_members
from emulator.odata import encode_token, parse_chat_messages_query
from emulator.paging import next_link
from emulator.routes_chats import CHAT_READ_ALL
from emulator.routes_drives_admin import file_reference
from emulator.state import CardAttachment, ChatMessage, Mention
from emulator.timestamps import epoch_ms

router = APIRouter(prefix="/v1.0")
MESSAGE_READ = {"Chat.Read", "Chat.ReadWrite"}


@router.get("/chats/{chat_id}/messages")
@router.get("/me/chats/{chat_id}/messages")
async def list_messages(
    chat_id: str, request: Request, caller: Caller = Depends(graph_caller("chat_messages"))
) -> JSONResponse:
    ctx = context_of(request)
    caller.require(MESSAGE_READ, CHAT_READ_ALL)
    query = parse_chat_messages_query(request.query_params.multi_items())
    ctx.state.readable_chat(chat_id, caller.user_id)

    def key(m: ChatMessage) -> tuple[int, int]:
        at = m.last_modified if query.order == "lastModifiedDateTime" else m.created
        return epoch_ms(at) * 1000, int(m.id)

    items = [
        m
        for m in ctx.state.messages(chat_id)
        if (query.after_us is None or key(m)[0] > query.after_us)
        and (query.before_us is None or key(m)[0] < query.before_us)
        and (query.cursor is None or key(m) < query.cursor)
    ]
    items.sort(key=key, reverse=True)
    page = items[: query.top]
    prefer_all = include_unknown_enum_members(request)
    value = [
        shapes.chat_message(
            m, tenant_id=ctx.seed.tenant_id, include_unknown_enum_members=prefer_all
        )
        for m in page
    ]
    body: dict[str, Any] = {
        "@odata.context": ctx.odata_context(request, "chats", chat_id, "messages"),
        "@odata.count": len(value),
        "value": value,
    }
    if len(items) > len(page):
        last_key = key(page[-1])
        token = encode_token(
            {"kind": "chatMessages", "order": query.order, "key": last_key[0], "id": last_key[1]}
        )
        body["@odata.nextLink"] = next_link(
            f"{ctx.graph_base(request)}/chats/{chat_id}/messages",
            request.query_params.multi_items(),
            "$skiptoken",
            token,
        )
    return JSONResponse(body)


@router.get("/chats/{chat_id}/messages/{message_id}")
async def get_message(
    chat_id: str,
    message_id: str,
    request: Request,
    caller: Caller = Depends(graph_caller("chat_messages")),
) -> JSONResponse:
    ctx = context_of(request)
    caller.require(MESSAGE_READ, CHAT_READ_ALL)
    ctx.state.readable_chat(chat_id, caller.user_id)
    message = next((m for m in ctx.state.messages(chat_id) if m.id == message_id), None)
    if message is None:
        raise not_found(f"Message '{message_id}' was not found in chat '{chat_id}'.")
    return JSONResponse(
        {
            "@odata.context": ctx.odata_context(request, "chats", chat_id, "messages", entity=True),
            **shapes.chat_message(
                message,
                tenant_id=ctx.seed.tenant_id,
                include_unknown_enum_members=include_unknown_enum_members(request),
            ),
        }
    )


@router.get("/chats/{chat_id}/messages/{message_id}/hostedContents")
async def list_hosted_contents(
    chat_id: str,
    message_id: str,
    request: Request,
    caller: Caller = Depends(graph_caller("chat_messages")),
) -> JSONResponse:
    """ "List hostedContents" (read, not run): delegated Chat.Read or Chat.ReadWrite; the objects only,
    contentBytes null — the bytes come from .../hostedContents/{id}/$value."""
    ctx = context_of(request)
    caller.require(MESSAGE_READ, CHAT_READ_ALL)
    ctx.state.readable_chat(chat_id, caller.user_id)
    value = [
        {"id": h.id, "contentType": h.content_type, "contentBytes": None}
        for h in ctx.state.hosted_contents(chat_id, message_id)
    ]
    return JSONResponse(
        {
            "@odata.context": ctx.odata_context(
                request, "chats", chat_id, f"messages('{message_id}')/hostedContents"
            ),
            "@odata.count": len(value),
            "value": value,
        }
    )


@router.get("/chats/{chat_id}/messages/{message_id}/hostedContents/{hosted_id}/$value")
async def hosted_content_value(
    chat_id: str,
    message_id: str,
    hosted_id: str,
    request: Request,
    caller: Caller = Depends(graph_caller("chat_messages")),
) -> Response:
    ctx = context_of(request)
    caller.require(MESSAGE_READ, CHAT_READ_ALL)
    ctx.state.readable_chat(chat_id, caller.user_id)
    hosted = next(
        (h for h in ctx.state.hosted_contents(chat_id, message_id) if h.id == hosted_id), None
    )
    if hosted is None:
        raise not_found(f"Hosted content '{hosted_id}' was not found in message '{message_id}'.")
    return Response(hosted.data, media_type=hosted.content_type)


def _mentions(ctx: EmulatorContext, raw: object, content: str, content_type: str) -> list[Mention]:
    """Graph's mentions on a new message, checked as "Send chatMessage in a chat" describes them (read,
    not run): each {id, mentionText, mentioned: {user: {id, userIdentityType}}} is matched by an
    <at id="N">mentionText</at> in an HTML body, and names a user of the tenant."""
    if raw is None or raw == []:
        return []
    if not isinstance(raw, list):
        raise bad_request("mentions must be a list of chatMessageMention objects.")
    if content_type != "html":
        raise bad_request(
            'A message with mentions needs an HTML body with an <at id="N"> tag for each.'
        )
    out: list[Mention] = []
    for item in raw:
        user = item.get("mentioned", {}).get("user") if isinstance(item, dict) else None
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("id"), int)
            or not isinstance(user, dict)
        ):
            raise bad_request("Each mention needs an integer id and mentioned.user.")
        text = item.get("mentionText")
        found = ctx.seed.find_user(str(user.get("id", "")))
        if found is None:
            raise bad_request(f"Mentioned user '{user.get('id')}' was not found.")
        if f'<at id="{item["id"]}">{text}</at>' not in content:
            raise bad_request(
                f'Mention {item["id"]} has no matching <at id="{item["id"]}">{text}</at> in the body.'
            )
        out.append(Mention(item["id"], str(text), found.id, found.display_name))
    if len({m.id for m in out}) != len(out):
        raise bad_request("Mention ids must be unique within a message.")
    return out


CARD_TYPES = frozenset(
    {
        "application/vnd.microsoft.card.adaptive",
        "application/vnd.microsoft.card.thumbnail",
        "application/vnd.microsoft.card.hero",
    }
)


def _cards(
    raw: object,
    content: str,
    content_type: str,
    reference: Callable[[dict[str, Any]], CardAttachment],
) -> list[CardAttachment]:
    """Card attachments on a new message, as "Send chatMessage in a chat" and "Working with Teams messaging
    APIs" describe them (read, not run): each {id, contentType, content: the card JSON as a string} is
    placed by an <attachment id="…"></attachment> in an HTML body. A file is a "reference" attachment,
    checked by ``reference`` (emulator.routes_drives_admin.file_reference)."""
    if raw is None or raw == []:
        return []
    if not isinstance(raw, list) or content_type != "html":
        raise bad_request(
            'attachments must be a list, with an HTML body placing each by <attachment id="…">.'
        )
    out: list[CardAttachment] = []
    for item in raw:
        if isinstance(item, dict) and item.get("contentType") == "reference":
            if f'<attachment id="{item.get("id")}"></attachment>' not in content:
                raise bad_request(
                    f'Attachment {item.get("id")} is not placed in the body by <attachment id="…">.'
                )
            out.append(reference(item))
            continue
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("id"), str)
            or not isinstance(item.get("content"), str)
        ):
            raise bad_request(
                "Each attachment needs a string id and its card as a JSON string in content."
            )
        kind = str(item.get("contentType", ""))
        if kind not in CARD_TYPES:
            raise bad_request(
                f"Attachment contentType '{kind}' is not a card type this emulator takes."
            )
        try:
            card = json.loads(item["content"])
        except json.JSONDecodeError:
            raise bad_request(f"Attachment {item['id']}: content is not valid JSON.") from None
        if kind.endswith("adaptive") and (
            not isinstance(card, dict) or card.get("type") != "AdaptiveCard"
        ):
            raise bad_request(
                f"Attachment {item['id']}: an Adaptive Card's type must be AdaptiveCard."
            )
        if f'<attachment id="{item["id"]}"></attachment>' not in content:
            raise bad_request(
                f'Attachment {item["id"]} is not placed in the body by <attachment id="{item["id"]}">.'
            )
        out.append(CardAttachment(item["id"], kind, item["content"]))
    return out


_TEMPORARY_REF = re.compile(r"\.\./hostedContents/([^/\"']*)/\$value")
MAX_HOSTED_BYTES = 4 * 1024 * 1024  # "The maximum possible size of hosted content is 4 MB."


def _hosted_contents(
    raw: object, content: str, content_type: str, attachments: list[CardAttachment]
) -> list[tuple[str, str, bytes]]:
    """Inline images on a new message, as "Create chatMessage in a channel or a chat" (example "Send inline
    images along with the message") describes them (read, not run): each {"@microsoft.graph.temporaryId",
    contentBytes (base64), contentType}, named in the HTML body by ``../hostedContents/{temporaryId}/$value``
    (or in a card's content). A reference to no temporary id, and a hosted content nobody references, are
    refused here with 400 (the page asks for the same id in both; what Graph answers otherwise it does not
    say). Returns (temporaryId, contentType, bytes) in the order given."""
    referenced = set(_TEMPORARY_REF.findall(content))
    if raw is None or raw == []:
        if referenced:
            raise bad_request(
                f"The body references hosted content '{min(referenced)}', but the message has "
                "no hostedContents: send each image with its @microsoft.graph.temporaryId."
            )
        return []
    if not isinstance(raw, list) or content_type != "html":
        raise bad_request("hostedContents must be a list, with an HTML body referencing each.")
    out: list[tuple[str, str, bytes]] = []
    for item in raw:
        temporary_id = item.get("@microsoft.graph.temporaryId") if isinstance(item, dict) else None
        kind = item.get("contentType") if isinstance(item, dict) else None
        encoded = item.get("contentBytes") if isinstance(item, dict) else None
        if not isinstance(temporary_id, str) or not temporary_id or not isinstance(kind, str):
            raise bad_request(
                "Each hosted content needs a @microsoft.graph.temporaryId and a contentType."
            )
        try:
            data = base64.b64decode(encoded, validate=True) if isinstance(encoded, str) else b""
        except binascii.Error:
            raise bad_request(
                f"Hosted content {temporary_id}: contentBytes is not base64."
            ) from None
        if not data or len(data) > MAX_HOSTED_BYTES:
            raise bad_request(
                f"Hosted content {temporary_id}: contentBytes must hold 1 byte to 4 MB."
            )
        out.append((temporary_id, kind, data))
    ids = [temporary_id for temporary_id, _, _ in out]
    if len(set(ids)) != len(ids):
        raise bad_request("Hosted content temporary ids must be unique within a message.")
    unnamed = sorted(referenced - set(ids))
    if unnamed:
        raise bad_request(
            f"The body references hosted content '{unnamed[0]}', which no "
            "@microsoft.graph.temporaryId names."
        )
    in_cards = "".join(a.content or "" for a in attachments)
    for name in ids:
        if name not in referenced and f"../hostedContents/{name}/$value" not in in_cards:
            raise bad_request(
                f"Hosted content {name} is not referenced: place it with "
                f'<img src="../hostedContents/{name}/$value">.'
            )
    return out


def _message_body(body: dict[str, Any]) -> tuple[str, str]:
    """The ``body`` of a chatMessage being posted or updated: (content, contentType lower-cased)."""
    item = body.get("body")
    if (
        not isinstance(item, dict)
        or not isinstance(item.get("content"), str)
        or not item["content"].strip()
    ):
        raise bad_request(
            'Missing body content: send {"body": {"contentType": "text", "content": "..."}}.'
        )
    content_type = str(item.get("contentType", "text")).lower()
    if content_type not in ("text", "html"):
        raise bad_request(f"Invalid contentType '{item.get('contentType')}': use 'text' or 'html'.")
    return item["content"], content_type


@router.patch("/chats/{chat_id}/messages/{message_id}", status_code=204)
async def update_message(
    chat_id: str,
    message_id: str,
    request: Request,
    caller: Caller = Depends(graph_caller("chat_messages")),
) -> Response:
    """ "Update chatMessage" (read, not run): delegated Chat.ReadWrite; with a user's token the body may be
    changed, by its sender only; 204 No Content. Other properties are not modelled and refused."""
    ctx = context_of(request)
    user_id = caller.me()
    caller.require({"Chat.ReadWrite"})
    body = await json_object(request)
    unknown = sorted(set(body) - {"body"})
    if unknown:
        raise bad_request(f"Updating {', '.join(unknown)} is not supported here; send only body.")
    content, content_type = _message_body(body)
    ctx.state.readable_chat(chat_id, user_id)
    ctx.state.own_message(chat_id, message_id, user_id)
    ctx.state.edit_message(chat_id, message_id, content, content_type)  # type: ignore[arg-type]
    return Response(status_code=204)


@router.post("/users/{user_id}/chats/{chat_id}/messages/{message_id}/softDelete", status_code=204)
async def soft_delete_message(
    user_id: str,
    chat_id: str,
    message_id: str,
    request: Request,
    caller: Caller = Depends(graph_caller("chat_messages")),
) -> Response:
    """ "chatMessage: softDelete" (read, not run): delegated Chat.ReadWrite only, application not supported;
    POST /users/{userId}/chats/{chatsId}/messages/{chatMessageId}/softDelete, 204 No Content. Deleting a
    message already deleted answers 204 again here (Graph's page does not say)."""
    ctx = context_of(request)
    me = caller.me()
    caller.require({"Chat.ReadWrite"})
    if user_id != me:
        raise forbidden(
            f"Only the signed-in user's own chats can be used: '{user_id}' is not the caller."
        )
    ctx.state.readable_chat(chat_id, me)
    message = ctx.state.own_message(chat_id, message_id, me)
    if message.deleted is None:
        ctx.state.delete_message(chat_id, message_id)
    return Response(status_code=204)


@router.post("/chats/{chat_id}/messages/{message_id}/setReaction", status_code=204)
async def set_reaction(
    chat_id: str,
    message_id: str,
    request: Request,
    caller: Caller = Depends(graph_caller("chat_messages")),
) -> Response:
    """ "chatMessage: setReaction" (v1.0; read, not run): delegated Chat.ReadWrite or ChatMessage.Send,
    application not supported; {"reactionType": "<unicode>"}; 204 No Content. The signed-in user reacts;
    a reaction of a type the user already set changes nothing (Teams keeps one per type and user; the page
    does not say what Graph answers, 204 here)."""
    ctx = context_of(request)
    user_id, reaction_type = await _reaction_call(chat_id, request, caller)
    ctx.state.react_to_message(chat_id, message_id, user_id, reaction_type)
    return Response(status_code=204)


@router.post("/chats/{chat_id}/messages/{message_id}/unsetReaction", status_code=204)
async def unset_reaction(
    chat_id: str,
    message_id: str,
    request: Request,
    caller: Caller = Depends(graph_caller("chat_messages")),
) -> Response:
    """ "chatMessage: unsetReaction" (v1.0; read, not run): the same permissions and body, 204 No Content."""
    ctx = context_of(request)
    user_id, reaction_type = await _reaction_call(chat_id, request, caller)
    ctx.state.unreact_to_message(chat_id, message_id, user_id, reaction_type)
    return Response(status_code=204)


async def _reaction_call(chat_id: str, request: Request, caller: Caller) -> tuple[str, str]:
    """(the signed-in user, the reactionType) of a setReaction or unsetReaction call, checked."""
    user_id = caller.me()
    caller.require({"Chat.ReadWrite", "ChatMessage.Send"})
    body = await json_object(request)
    reaction_type = body.get("reactionType")
    if not isinstance(reaction_type, str) or not reaction_type.strip():
        raise bad_request('Missing reactionType: send {"reactionType": "<a unicode emoji>"}.')
    context_of(request).state.readable_chat(chat_id, user_id)
    return user_id, reaction_type


@router.post("/chats/{chat_id}/messages", status_code=201)
async def post_message(
    chat_id: str, request: Request, caller: Caller = Depends(graph_caller("chat_messages"))
) -> JSONResponse:
    ctx = context_of(request)
    user_id = caller.me()
    caller.require({"ChatMessage.Send", "Chat.ReadWrite"})
    body = await json_object(request)
    content, content_type = _message_body(body)
    ctx.state.readable_chat(chat_id, user_id)
    mentions = _mentions(ctx, body.get("mentions"), content, content_type)
    attachments = _cards(
        body.get("attachments"), content, content_type, file_reference(request, user_id)
    )
    hosted = _hosted_contents(body.get("hostedContents"), content, content_type, attachments)
    if hosted:
        message = ctx.state.post_with_hosted_contents(
            chat_id,
            hosted,
            sender_id=user_id,
            content=content,
            mentions=mentions,
            attachments=attachments,
        )
    else:
        message = ctx.state.post_message(
            chat_id,
            sender_id=user_id,
            content=content,
            mentions=mentions,
            attachments=attachments,
            content_type=content_type,  # type: ignore[arg-type]
        )
    return JSONResponse(
        {
            "@odata.context": ctx.odata_context(request, "chats", chat_id, "messages", entity=True),
            **shapes.chat_message(
                message,
                tenant_id=ctx.seed.tenant_id,
                include_unknown_enum_members=include_unknown_enum_members(request),
            ),
        },
        status_code=201,
    )

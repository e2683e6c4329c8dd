"""Graph v1.0 mail: list the signed-in user's messages (all folders or one), get one, and send mail."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse

from emulator import shapes
from emulator.bodies import json_object
from emulator.context import EmulatorContext, context_of
from emulator.errors import bad_request, forbidden, not_found
from emulator.graph_auth import Caller, graph_caller
from emulator.odata import Clause, MailQuery, parse_mail_query
from emulator.paging import next_link
from emulator.state import Folder, MailMessage

router = APIRouter(prefix="/v1.0")
MAIL_READ = {"Mail.ReadBasic", "Mail.Read", "Mail.ReadWrite"}


@router.get("/me/messages")
async def list_messages(request: Request, caller: Caller = Depends(graph_caller("mail"))) -> JSONResponse:
    return _list(request, caller, folder=None)


@router.get("/me/mailFolders/{folder}/messages")
async def list_folder_messages(folder: str, request: Request,
                               caller: Caller = Depends(graph_caller("mail"))) -> JSONResponse:
    ctx = context_of(request)
    named = ctx.state.folder_named(caller.me(), folder)
    if named is None:
        raise not_found("The specified object was not found in the store.", "ErrorItemNotFound")
    return _list(request, caller, folder=named)


@router.get("/me/messages/{message_id}")
async def get_message(message_id: str, request: Request,
                      caller: Caller = Depends(graph_caller("mail"))) -> JSONResponse:
    ctx = context_of(request)
    user_id = caller.me()
    caller.require(MAIL_READ, workload="outlook")
    message = ctx.state.mail_item(user_id, message_id)
    if message is None:
        raise not_found("The specified object was not found in the store.", "ErrorItemNotFound")
    return JSONResponse({"@odata.context": ctx.odata_context(request, "users", user_id, "messages", entity=True),
                         **shapes.mail_message(message, folder_id=ctx.state.folder_id(user_id, message.folder))})


@router.post("/me/sendMail", status_code=202)
async def send_mail(request: Request, caller: Caller = Depends(graph_caller("mail"))) -> Response:
    return await _send(request, caller, caller.me())


@router.post("/users/{user_ref}/sendMail", status_code=202)
async def send_mail_as(user_ref: str, request: Request, caller: Caller = Depends(graph_caller("mail"))) -> Response:
    ctx = context_of(request)
    user = ctx.seed.find_user(user_ref)
    if user is None:
        raise not_found(f"The requested user '{user_ref}' is invalid.", "ErrorInvalidUser")
    if caller.user_id is not None and caller.user_id != user.id:
        raise forbidden("Access is denied. Check credentials and try again.", "ErrorAccessDenied")
    return await _send(request, caller, user.id)


def _list(request: Request, caller: Caller, folder: Folder | None) -> JSONResponse:
    ctx = context_of(request)
    user_id = caller.me()
    caller.require(MAIL_READ, workload="outlook")
    query = parse_mail_query(request.query_params.multi_items())
    if query.select is not None:
        unknown = [f for f in query.select if f not in shapes.MAIL_PROPERTIES]
        if unknown:
            raise bad_request(f"Could not find a property named '{unknown[0]}' on type "
                              "'Microsoft.OutlookServices.Message'.", "RequestBroker--ParseUri")
    items = [m for m in ctx.state.mailbox(user_id, folder) if all(_matches(m, c) for c in query.clauses)]
    _sort(items, query)
    page = items[query.skip: query.skip + query.top]
    with_headers = "internetMessageHeaders" in (query.select or ())
    value = [shapes.select(shapes.mail_message(m, folder_id=ctx.state.folder_id(user_id, m.folder),
                                               headers=with_headers), query.select)
             for m in page]
    context = ctx.odata_context(request, "users", user_id, "messages")
    if query.select:
        context += f"({','.join(query.select)})"
    body: dict[str, Any] = {"@odata.context": context}
    if request.query_params.get("$count", "").lower() == "true":
        body["@odata.count"] = len(items)
    body["value"] = value
    if query.skip + query.top < len(items):
        body["@odata.nextLink"] = next_link(f"{ctx.graph_base(request)}{request.url.path[len('/v1.0'):]}",
                                            request.query_params.multi_items(), "$skip",
                                            str(query.skip + query.top))
    return JSONResponse(body)


def _matches(m: MailMessage, clause: Clause) -> bool:
    # Each branch pairs two values of one type (ints, bools or strings); the operator below is generic.
    left: Any
    right: Any
    if clause.prop in ("receivedDateTime", "sentDateTime"):
        at = m.received if clause.prop == "receivedDateTime" else m.sent
        left, right = int(at.timestamp()) * 1_000_000, clause.datetime_us()
    elif clause.prop == "isRead":
        left, right = m.is_read, clause.boolean()
    elif clause.prop == "hasAttachments":
        left, right = False, clause.boolean()
    elif clause.prop == "subject":
        left, right = m.subject.lower(), clause.string().lower()
    else:  # from/emailAddress/address
        left, right = m.sender.address.lower(), clause.string().lower()
    return bool({
        "eq": lambda: left == right, "ne": lambda: left != right, "gt": lambda: left > right,
        "ge": lambda: left >= right, "lt": lambda: left < right, "le": lambda: left <= right,
    }[clause.op]())


def _sort(items: list[MailMessage], query: MailQuery) -> None:
    keys = {"receivedDateTime": lambda m: m.received, "sentDateTime": lambda m: m.sent,
            "subject": lambda m: m.subject.lower()}
    items.sort(key=lambda m: m.id)  # a deterministic base order for ties
    for prop, descending in reversed(query.order):  # stable sorts, least significant key first
        items.sort(key=keys[prop], reverse=descending)


async def _send(request: Request, caller: Caller, sender_id: str) -> Response:
    ctx: EmulatorContext = context_of(request)
    caller.require({"Mail.Send"}, {"Mail.Send"}, workload="outlook")
    body = await json_object(request)
    message = body.get("message")
    if not isinstance(message, dict):
        raise bad_request("Empty Payload. JSON content expected: send {\"message\": {...}}.", "ErrorInvalidRequest")
    to = _addresses(message.get("toRecipients"))
    cc = _addresses(message.get("ccRecipients"))
    bcc = _addresses(message.get("bccRecipients"))
    if not to and not cc and not bcc:
        raise bad_request("At least one recipient isn't valid., A message can't be sent because it contains no "
                          "recipients.", "ErrorInvalidRecipients")
    item = message.get("body") or {}
    if not isinstance(item, dict):
        raise bad_request("message.body must be an object with contentType and content.", "ErrorInvalidRequest")
    content_type = str(item.get("contentType", "text")).lower()
    if content_type not in ("text", "html"):
        raise bad_request(f"Invalid contentType '{item.get('contentType')}': use Text or HTML.",
                          "ErrorInvalidRequest")
    save = body.get("saveToSentItems", True)
    save = save if isinstance(save, bool) else str(save).lower() != "false"
    ctx.state.send_mail(sender_id, to=to, cc=cc, bcc=bcc, subject=str(message.get("subject") or ""),
                        body=str(item.get("content") or ""), content_type=content_type,  # type: ignore[arg-type]
                        save_to_sent=save)
    return Response(status_code=202)


def _addresses(recipients: object) -> list[str]:
    if recipients is None:
        return []
    if not isinstance(recipients, list):
        raise bad_request("Recipients must be a list of {\"emailAddress\": {\"address\": ...}}.",
                          "ErrorInvalidRecipients")
    out = []
    for r in recipients:
        address = r.get("emailAddress", {}).get("address") if isinstance(r, dict) else None
        if not isinstance(address, str) or "@" not in address:
            raise bad_request("At least one recipient isn't valid.", "ErrorInvalidRecipients")
        out.append(address)
    return out

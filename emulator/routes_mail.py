"""Graph v1.0 mail reads: the signed-in user's messages (all folders or one) and one message, and the
same of a mailbox shared with them (``/users/{id | userPrincipalName}/…``). Sending: ``routes_mail_send``.

A mailbox of someone else is read with a delegated token carrying Mail.Read.Shared or
Mail.ReadWrite.Shared by a user its owner (or an Exchange admin) gave access, or with an app-only token
holding Mail.Read; anything else is 403 ErrorAccessDenied ("Get Outlook messages in a shared or delegated
folder", and Q&A answers showing the error; read, not run: no tenant).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from emulator import shapes
from emulator.context import context_of
from emulator.errors import bad_request, forbidden, not_found
from emulator.graph_auth import Caller, graph_caller
from emulator.odata import Clause, MailQuery, parse_mail_query
from emulator.paging import next_link
from emulator.state import Folder, MailMessage

router = APIRouter(prefix="/v1.0")
MAIL_READ = {"Mail.ReadBasic", "Mail.Read", "Mail.ReadWrite"}
MAIL_READ_SHARED = {"Mail.Read.Shared", "Mail.ReadWrite.Shared"}
MAIL_READ_APPLICATION = {"Mail.Read", "Mail.ReadBasic.All", "Mail.ReadWrite"}
_ACCESS_DENIED = "Access is denied. Check credentials and try again."


@router.get("/me/messages")
async def list_messages(
    request: Request, caller: Caller = Depends(graph_caller("mail"))
) -> JSONResponse:
    return _list(request, _own(caller), folder=None)


@router.get("/me/mailFolders/{folder}/messages")
async def list_folder_messages(
    folder: str, request: Request, caller: Caller = Depends(graph_caller("mail"))
) -> JSONResponse:
    owner = _own(caller)
    return _list(request, owner, folder=_folder(request, owner, folder))


@router.get("/me/messages/{message_id}")
async def get_message(
    message_id: str, request: Request, caller: Caller = Depends(graph_caller("mail"))
) -> JSONResponse:
    return _get(request, _own(caller), message_id)


@router.get("/users/{user_ref}/messages")
async def list_user_messages(
    user_ref: str, request: Request, caller: Caller = Depends(graph_caller("mail"))
) -> JSONResponse:
    return _list(request, _readable(request, caller, user_ref), folder=None)


@router.get("/users/{user_ref}/mailFolders/{folder}/messages")
async def list_user_folder_messages(
    user_ref: str, folder: str, request: Request, caller: Caller = Depends(graph_caller("mail"))
) -> JSONResponse:
    owner = _readable(request, caller, user_ref)
    return _list(request, owner, folder=_folder(request, owner, folder))


@router.get("/users/{user_ref}/messages/{message_id}")
async def get_user_message(
    user_ref: str, message_id: str, request: Request, caller: Caller = Depends(graph_caller("mail"))
) -> JSONResponse:
    return _get(request, _readable(request, caller, user_ref), message_id)


def _own(caller: Caller) -> str:
    owner = caller.me()
    caller.require(MAIL_READ, workload="outlook")
    return owner


def _readable(request: Request, caller: Caller, user_ref: str) -> str:
    """The id of the mailbox ``user_ref`` names, when the caller may read it."""
    ctx = context_of(request)
    user = ctx.seed.find_user(user_ref)
    if user is None:
        raise not_found(f"The requested user '{user_ref}' is invalid.", "ErrorInvalidUser")
    if caller.user_id is None:
        caller.require(
            set(), MAIL_READ_APPLICATION, workload="outlook"
        )  # an app may read any mailbox
        return user.id
    if caller.user_id == user.id:
        return _own(caller)
    if not caller.scopes & MAIL_READ_SHARED or not ctx.seed.may_read_mailbox(caller.user_id, user):
        raise forbidden(_ACCESS_DENIED, "ErrorAccessDenied")
    return user.id


def _folder(request: Request, owner: str, ref: str) -> Folder:
    named = context_of(request).state.folder_named(owner, ref)
    if named is None:
        raise not_found("The specified object was not found in the store.", "ErrorItemNotFound")
    return named


def _get(request: Request, owner: str, message_id: str) -> JSONResponse:
    ctx = context_of(request)
    message = ctx.state.mail_item(owner, message_id)
    if message is None:
        raise not_found("The specified object was not found in the store.", "ErrorItemNotFound")
    return JSONResponse(
        {
            "@odata.context": ctx.odata_context(request, "users", owner, "messages", entity=True),
            **shapes.mail_message(message, folder_id=ctx.state.folder_id(owner, message.folder)),
        }
    )


def _list(request: Request, user_id: str, folder: Folder | None) -> JSONResponse:
    ctx = context_of(request)
    query = parse_mail_query(request.query_params.multi_items())
    if query.select is not None:
        unknown = [f for f in query.select if f not in shapes.MAIL_PROPERTIES]
        if unknown:
            raise bad_request(
                f"Could not find a property named '{unknown[0]}' on type "
                "'Microsoft.OutlookServices.Message'.",
                "RequestBroker--ParseUri",
            )
    items = [
        m for m in ctx.state.mailbox(user_id, folder) if all(_matches(m, c) for c in query.clauses)
    ]
    _sort(items, query)
    page = items[query.skip : query.skip + query.top]
    with_headers = "internetMessageHeaders" in (query.select or ())
    value = [
        shapes.select(
            shapes.mail_message(
                m, folder_id=ctx.state.folder_id(user_id, m.folder), headers=with_headers
            ),
            query.select,
        )
        for m in page
    ]
    context = ctx.odata_context(request, "users", user_id, "messages")
    if query.select:
        context += f"({','.join(query.select)})"
    body: dict[str, Any] = {"@odata.context": context}
    if request.query_params.get("$count", "").lower() == "true":
        body["@odata.count"] = len(items)
    body["value"] = value
    if query.skip + query.top < len(items):
        body["@odata.nextLink"] = next_link(
            f"{ctx.graph_base(request)}{request.url.path[len('/v1.0') :]}",
            request.query_params.multi_items(),
            "$skip",
            str(query.skip + query.top),
        )
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
    return bool(
        {
            "eq": lambda: left == right,
            "ne": lambda: left != right,
            "gt": lambda: left > right,
            "ge": lambda: left >= right,
            "lt": lambda: left < right,
            "le": lambda: left <= right,
        }[clause.op]()
    )


def _sort(items: list[MailMessage], query: MailQuery) -> None:
    keys = {
        "receivedDateTime": lambda m: m.received,
        "sentDateTime": lambda m: m.sent,
        "subject": lambda m: m.subject.lower(),
    }
    items.sort(key=lambda m: m.id)  # a deterministic base order for ties
    for prop, descending in reversed(query.order):  # stable sorts, least significant key first
        items.sort(key=keys[prop], reverse=descending)

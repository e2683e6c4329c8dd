"""Graph v1.0 mail out: ``sendMail``, and ``reply`` / ``replyAll`` / ``forward`` of a message in the
signed-in user's mailbox. Each answers 202 Accepted with no body and keeps a copy in Sent Items.

Custom internet message headers (``message.internetMessageHeaders``, the sendMail page's example 2) travel
with the mail; a name that does not start with ``x-`` is refused with 400 InvalidInternetMessageHeader
("The internet message header name '…' should start with 'x-' or 'X-'.": the error Graph users report,
read, not run). Graph documents the message parameter of reply and forward as "any writeable properties
to update in the reply message"; whether it takes internetMessageHeaders there is not stated, and here
it does, as on sendMail (read, not run).
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Request, Response

from emulator.bodies import GraphBody, json_object
from emulator.context import context_of
from emulator.errors import bad_request, forbidden, not_found
from emulator.graph_auth import Caller, graph_caller
from emulator.mail_replies import ReplyKind, answer_subject, quoted_body, reply_recipients

router = APIRouter(prefix="/v1.0")
MAIL_SEND = {"Mail.Send"}


@router.post("/me/sendMail", status_code=202)
async def send_mail(request: Request, caller: Caller = Depends(graph_caller("mail"))) -> Response:
    return await _send(request, caller, caller.me())


@router.post("/users/{user_ref}/sendMail", status_code=202)
async def send_mail_as(
    user_ref: str, request: Request, caller: Caller = Depends(graph_caller("mail"))
) -> Response:
    ctx = context_of(request)
    user = ctx.seed.find_user(user_ref)
    if user is None:
        raise not_found(f"The requested user '{user_ref}' is invalid.", "ErrorInvalidUser")
    if caller.user_id is not None and caller.user_id != user.id:
        raise forbidden("Access is denied. Check credentials and try again.", "ErrorAccessDenied")
    return await _send(request, caller, user.id)


@router.post("/me/messages/{message_id}/reply", status_code=202)
async def reply(
    message_id: str, request: Request, caller: Caller = Depends(graph_caller("mail"))
) -> Response:
    return await _answer(request, caller, message_id, "reply")


@router.post("/me/messages/{message_id}/replyAll", status_code=202)
async def reply_all(
    message_id: str, request: Request, caller: Caller = Depends(graph_caller("mail"))
) -> Response:
    return await _answer(request, caller, message_id, "replyAll")


@router.post("/me/messages/{message_id}/forward", status_code=202)
async def forward(
    message_id: str, request: Request, caller: Caller = Depends(graph_caller("mail"))
) -> Response:
    return await _answer(request, caller, message_id, "forward")


async def _send(request: Request, caller: Caller, sender_id: str) -> Response:
    ctx = context_of(request)
    caller.require(MAIL_SEND, MAIL_SEND, workload="outlook")
    body = await json_object(request)
    message = body.get("message")
    if not isinstance(message, dict):
        raise bad_request(
            'Empty Payload. JSON content expected: send {"message": {...}}.', "ErrorInvalidRequest"
        )
    to = _addresses(message.get("toRecipients"))
    cc = _addresses(message.get("ccRecipients"))
    bcc = _addresses(message.get("bccRecipients"))
    if not to and not cc and not bcc:
        raise bad_request(
            "At least one recipient isn't valid., A message can't be sent because it contains no "
            "recipients.",
            "ErrorInvalidRecipients",
        )
    content, content_type = _item_body(message.get("body") or {})
    save = body.get("saveToSentItems", True)
    save = save if isinstance(save, bool) else str(save).lower() != "false"
    ctx.state.send_mail(
        sender_id,
        to=to,
        cc=cc,
        bcc=bcc,
        subject=str(message.get("subject") or ""),
        body=content,
        content_type=content_type,
        save_to_sent=save,
        headers=_custom_headers(message),
    )
    return Response(status_code=202)


async def _answer(request: Request, caller: Caller, message_id: str, kind: ReplyKind) -> Response:
    ctx = context_of(request)
    me = caller.me()
    caller.require(MAIL_SEND, MAIL_SEND, workload="outlook")
    body = await json_object(request)
    original = ctx.state.mail_item(me, message_id)
    if original is None:
        raise not_found("The specified object was not found in the store.", "ErrorItemNotFound")
    raw_message = body.get("message")
    if raw_message is not None and not isinstance(raw_message, dict):
        raise bad_request(
            "message must be an object with the properties to set on the reply.",
            "ErrorInvalidRequest",
        )
    message: GraphBody = raw_message if isinstance(raw_message, GraphBody) else GraphBody({})
    comment = body.get("comment")
    if comment is not None and not isinstance(comment, str):
        raise bad_request("comment must be a string.", "ErrorInvalidRequest")
    if comment is not None and message.get("body") is not None:
        # Documented as a 400; Graph's code for it is not (read, not run).
        raise bad_request(
            "Specify either a comment or the body property of the message parameter, not both.",
            "ErrorInvalidRequest",
        )
    if message.get("body") is not None:
        said, _ = _item_body(message["body"])
    else:
        said = comment or ""
    extra_to = _addresses(message.get("toRecipients"))
    extra_cc = _addresses(message.get("ccRecipients"))
    if kind == "forward":
        given = body.get("toRecipients")
        if (given is None) == (message.get("toRecipients") is None):
            raise bad_request(
                "Specify either the toRecipients parameter or the toRecipients property of the "
                "message parameter, exactly one of them.",
                "ErrorInvalidRecipients",
            )
        to = tuple(_addresses(given)) if given is not None else tuple(extra_to)
        cc = tuple(extra_cc)
        if not to:
            raise bad_request(
                "At least one recipient isn't valid., A message can't be forwarded because it "
                "contains no recipients.",
                "ErrorInvalidRecipients",
            )
    else:
        me_user = ctx.seed.find_user(me)
        assert me_user is not None  # a signed-in user is a user of the tenant
        to, cc = reply_recipients(kind, original, me_user.address)
        to, cc = (*to, *extra_to), (*cc, *extra_cc)
    ctx.state.send_mail(
        me,
        to=to,
        cc=cc,
        bcc=(),
        subject=answer_subject(kind, original.subject),
        body=quoted_body(original, said),
        content_type="html",
        save_to_sent=True,
        headers=_custom_headers(message),
        conversation_id=None if kind == "forward" else original.conversation_id,
    )
    return Response(status_code=202)


def _item_body(item: Any) -> tuple[str, Literal["text", "html"]]:
    if not isinstance(item, dict):
        raise bad_request(
            "message.body must be an object with contentType and content.", "ErrorInvalidRequest"
        )
    content_type = str(item.get("contentType", "text")).lower()
    if content_type not in ("text", "html"):
        raise bad_request(
            f"Invalid contentType '{item.get('contentType')}': use Text or HTML.",
            "ErrorInvalidRequest",
        )
    return str(item.get("content") or ""), "html" if content_type == "html" else "text"


def _custom_headers(message: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    raw = message.get("internetMessageHeaders")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise bad_request(
            'internetMessageHeaders must be a list of {"name", "value"}.', "ErrorInvalidRequest"
        )
    headers = []
    for header in raw:
        name = header.get("name") if isinstance(header, dict) else None
        value = header.get("value") if isinstance(header, dict) else None
        if not isinstance(name, str) or not isinstance(value, str):
            raise bad_request(
                "Each internet message header needs a string name and value.", "ErrorInvalidRequest"
            )
        if not name.lower().startswith("x-"):
            raise bad_request(
                f"The internet message header name '{name}' should start with 'x-' or 'X-'.",
                "InvalidInternetMessageHeader",
            )
        headers.append((name, value))
    return tuple(headers)


def _addresses(recipients: object) -> list[str]:
    if recipients is None:
        return []
    if not isinstance(recipients, list):
        raise bad_request(
            'Recipients must be a list of {"emailAddress": {"address": ...}}.',
            "ErrorInvalidRecipients",
        )
    out = []
    for r in recipients:
        address = r.get("emailAddress", {}).get("address") if isinstance(r, dict) else None
        if not isinstance(address, str) or "@" not in address:
            raise bad_request("At least one recipient isn't valid.", "ErrorInvalidRecipients")
        out.append(address)
    return out

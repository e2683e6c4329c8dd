"""The emulator's own controls under /_emulator (a prefix Graph never uses): fault injection, token
revocation, forced throttling, per-limit throttling statistics, holds, request statistics, the tenant
clock, and direct injection of chats, messages and mail for tests and traffic generators; edits, soft
deletes and reactions of messages (each moves the message's lastModifiedDateTime, as in Graph).
Unauthenticated: the emulator is a local dev tool.
"""

from __future__ import annotations

import base64
import binascii
import html
from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, model_validator

from emulator import shapes
from emulator.clock import ManualClock
from emulator.context import EmulatorContext, context_of
from emulator.errors import GraphError, bad_request
from emulator.faults import FaultRule
from emulator.routes_drives_admin import shared_file_attachments
from emulator.state import CardAttachment
from emulator.timestamps import resolve_time

router = APIRouter(prefix="/_emulator")


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class RevokeRequest(_Body):
    all: bool = False
    user: str | None = None  # id or UPN
    app: str | None = None

    @model_validator(mode="after")
    def _something(self) -> RevokeRequest:
        if not (self.all or self.user or self.app):
            raise ValueError(
                'say what to revoke: {"all": true}, {"user": "<id or UPN>"} or {"app": "<app id>"}'
            )
        return self


class ThrottleRequest(_Body):
    requests: int = Field(ge=1)
    retry_after: int = Field(1, ge=0)


class HoldRequest(_Body):
    route_pattern: str = Field(min_length=1)


class InjectChat(_Body):
    members: list[str]
    chat_type: Literal["oneOnOne", "group"] = "group"
    topic: str | None = None
    id: str | None = None
    created: str | None = None  # ISO-8601 or relative ("-7d")


class PastedImage(_Body):
    content_type: Literal["image/png", "image/jpeg", "image/gif", "image/webp"] = "image/png"
    data_base64: str = Field(min_length=4)


class InjectMessage(_Body):
    from_user: str | None = None
    content: str = ""
    content_type: Literal["text", "html"] = "text"
    created: str | None = None
    message_type: Literal["message", "systemEventMessage", "chatEvent"] = "message"
    images: list[PastedImage] = Field(
        default_factory=list, max_length=10
    )  # hosted contents, as Teams pastes them
    # Files pasted as links (sharing links or webUrls of drive files): reference attachments.
    files: list[str] = Field(default_factory=list, max_length=10)


class EditMessage(_Body):
    content: str


class ReactToMessage(_Body):
    user: str  # id or UPN of a chat member
    reaction_type: str = Field("like", min_length=1)


class InjectMail(_Body):
    to: str
    from_address: str = Field(alias="from")
    from_name: str | None = None
    subject: str = ""
    body: str = ""
    content_type: Literal["text", "html"] = "text"
    received: str | None = None
    headers: dict[str, str] = {}  # internetMessageHeaders, name -> value


class AdvanceClock(_Body):
    seconds: float = Field(gt=0)


@router.get("/health")
async def health() -> dict[str, bool]:
    return {"ok": True}


@router.get("/tenant")
async def tenant(request: Request) -> dict[str, Any]:
    """The ids a separate process needs to drive this tenant (no secrets)."""
    ctx = context_of(request)
    seed = ctx.seed
    return {
        "tenant_id": seed.tenant_id,
        "tenant_domain": seed.tenant_domain,
        "base_url": ctx.base(request),
        "graph_url": ctx.graph_base(request),
        "authority": ctx.base(request),
        "agent_identity_id": seed.agent_identity.id if seed.agent_identities else None,
        "blueprint_app_id": seed.blueprint.app_id if seed.agent_identities else None,
        "agent_user_id": seed.agent_user.id if seed.agent_identities else None,
        "agent_user_upn": seed.agent_user.user_principal_name if seed.agent_identities else None,
        "users": [
            {
                "id": u.id,
                "upn": u.user_principal_name,
                "display_name": u.display_name,
                "agent": u.is_agent_user,
            }
            for u in seed.users
        ],
        "now": ctx.clock.now().isoformat(),
    }


class SponsorToAdd(_Body):
    user: str  # id or UPN


@router.post("/agent_identities/{identity_id}/sponsors", status_code=201)
async def add_sponsor(identity_id: str, body: SponsorToAdd, request: Request) -> dict[str, str]:
    """What an admin adding a user sponsor in Entra does: the next sponsors list names them."""
    ctx = context_of(request)
    try:
        ctx.seed = ctx.seed.with_sponsor(identity_id, body.user)
    except LookupError as exc:
        raise bad_request(str(exc)) from exc
    return {"added": body.user}


@router.delete("/agent_identities/{identity_id}/sponsors/{sponsor_id}")
async def remove_sponsor(identity_id: str, sponsor_id: str, request: Request) -> dict[str, str]:
    """What an admin removing a sponsor in Entra does: the next sponsors list no longer names them."""
    ctx = context_of(request)
    try:
        ctx.seed = ctx.seed.without_sponsor(identity_id, sponsor_id)
    except LookupError as exc:
        raise bad_request(str(exc)) from exc
    return {"removed": sponsor_id}


@router.post("/faults", status_code=201)
async def add_fault(rule: FaultRule, request: Request) -> dict[str, Any]:
    return {"id": context_of(request).faults.add(rule), **rule.model_dump()}


@router.get("/faults")
async def list_faults(request: Request) -> dict[str, Any]:
    return {"faults": context_of(request).faults.describe()}


@router.delete("/faults")
async def clear_faults(request: Request) -> dict[str, int]:
    return {"cleared": context_of(request).faults.clear()}


@router.post("/revoke")
async def revoke(body: RevokeRequest, request: Request) -> dict[str, int]:
    ctx = context_of(request)
    user_id = None
    if body.user:
        user = ctx.seed.find_user(body.user)
        if user is None:
            raise bad_request(f"user {body.user!r} is not in the tenant")
        user_id = user.id
    # As an admin revoking a user's sessions does: their refresh tokens stop working too.
    return {
        "revoked": ctx.tokens.revoke(everything=body.all, user_id=user_id, app_id=body.app),
        "refresh_tokens_revoked": ctx.refresh_tokens.revoke(
            everything=body.all, user_id=user_id, app_id=body.app
        ),
    }


@router.post("/throttle")
async def throttle(body: ThrottleRequest, request: Request) -> dict[str, int]:
    context_of(request).throttle.force(body.requests, body.retry_after)
    return {"requests": body.requests, "retry_after": body.retry_after}


@router.get("/throttle")
async def throttle_stats(request: Request) -> dict[str, Any]:
    """Per limit: its figure (requests per window, scope) and the requests it admitted and throttled."""
    return context_of(request).throttle.stats()


@router.delete("/throttle")
async def reset_throttle(request: Request) -> dict[str, bool]:
    """Empty every window and zero the per-limit counters (e.g. between benchmark phases)."""
    context_of(request).throttle.reset()
    return {"reset": True}


@router.post("/holds")
async def hold(body: HoldRequest, request: Request) -> dict[str, str]:
    """Admitted Graph requests on paths matching ``route_pattern`` wait until DELETE /holds."""
    try:
        context_of(request).holds.hold(body.route_pattern)
    except ValueError as exc:
        raise bad_request(str(exc)) from None
    return {"route_pattern": body.route_pattern}


@router.get("/holds")
async def holds(request: Request) -> dict[str, int]:
    return {"waiting": context_of(request).holds.waiting}


@router.delete("/holds")
async def release_holds(request: Request) -> dict[str, int]:
    return {"released": context_of(request).holds.release()}


@router.get("/stats")
async def stats(request: Request, recent: int = 1000) -> dict[str, Any]:
    return context_of(request).stats.snapshot(recent=recent)


@router.post("/stats/reset")
async def reset_stats(request: Request) -> dict[str, bool]:
    context_of(request).stats.reset()
    return {"reset": True}


@router.post("/clock")
async def advance_clock(body: AdvanceClock, request: Request) -> dict[str, str]:
    clock = context_of(request).clock
    if not isinstance(clock, ManualClock):
        raise GraphError(
            409,
            "Conflict",
            "The tenant runs on the system clock; start the emulator with a "
            "ManualClock to move time.",
        )
    return {"now": clock.advance(body.seconds).isoformat()}


@router.post("/chats", status_code=201)
async def inject_chat(body: InjectChat, request: Request) -> JSONResponse:
    ctx = context_of(request)
    created = _time(body.created, ctx)
    chat, _ = ctx.state.create_chat(
        body.chat_type, body.members, topic=body.topic, created=created, chat_id=body.id
    )
    return JSONResponse(
        shapes.chat(chat, tenant_id=ctx.seed.tenant_id, members=True), status_code=201
    )


@router.post("/chats/{chat_id}/messages", status_code=201)
async def inject_message(chat_id: str, body: InjectMessage, request: Request) -> JSONResponse:
    ctx = context_of(request)
    sender = ctx.seed.find_user(body.from_user) if body.from_user else None
    if body.from_user and sender is None:
        raise bad_request(f"from_user {body.from_user!r} is not in the tenant")
    if body.message_type == "message" and sender is None:
        raise bad_request("a message of type 'message' needs from_user")
    content, content_type = body.content, body.content_type
    attachments: list[CardAttachment] = []
    if body.files:
        # Files pasted into the message: reference attachments, placed in an HTML body (routes_drives_admin).
        if sender is None:
            raise bad_request("a message with files needs from_user")
        attachments, tags = shared_file_attachments(request, sender.id, body.files)
        text = content if content_type == "html" else html.escape(content)
        content, content_type = f"<p>{text}</p>{tags}", "html"
    message = ctx.state.post_message(
        chat_id,
        sender_id=sender.id if sender else None,
        content=content,
        content_type=content_type,
        created=_time(body.created, ctx),
        message_type=body.message_type,
        attachments=attachments,
    )
    if body.images:
        try:
            images = [
                (i.content_type, base64.b64decode(i.data_base64, validate=True))
                for i in body.images
            ]
        except binascii.Error:
            raise bad_request("images[].data_base64 is not base64") from None
        message = ctx.state.attach_images(chat_id, message.id, images)
    return JSONResponse(
        shapes.chat_message(
            message, tenant_id=ctx.seed.tenant_id, include_unknown_enum_members=True
        ),
        status_code=201,
    )


@router.patch("/chats/{chat_id}/messages/{message_id}")
async def edit_message(
    chat_id: str, message_id: str, body: EditMessage, request: Request
) -> JSONResponse:
    ctx = context_of(request)
    message = ctx.state.edit_message(chat_id, message_id, body.content)
    return JSONResponse(
        shapes.chat_message(
            message, tenant_id=ctx.seed.tenant_id, include_unknown_enum_members=True
        )
    )


@router.delete("/chats/{chat_id}/messages/{message_id}")
async def delete_message(chat_id: str, message_id: str, request: Request) -> JSONResponse:
    ctx = context_of(request)
    message = ctx.state.delete_message(chat_id, message_id)
    return JSONResponse(
        shapes.chat_message(
            message, tenant_id=ctx.seed.tenant_id, include_unknown_enum_members=True
        )
    )


@router.post("/chats/{chat_id}/messages/{message_id}/reactions", status_code=201)
async def react_to_message(
    chat_id: str, message_id: str, body: ReactToMessage, request: Request
) -> JSONResponse:
    ctx = context_of(request)
    message = ctx.state.react_to_message(chat_id, message_id, body.user, body.reaction_type)
    return JSONResponse(
        shapes.chat_message(
            message, tenant_id=ctx.seed.tenant_id, include_unknown_enum_members=True
        ),
        status_code=201,
    )


@router.post("/mail", status_code=201)
async def inject_mail(body: InjectMail, request: Request) -> JSONResponse:
    ctx = context_of(request)
    message = ctx.state.deliver_mail(
        to=body.to,
        from_address=body.from_address,
        from_name=body.from_name,
        subject=body.subject,
        body=body.body,
        content_type=body.content_type,
        received=_time(body.received, ctx),
        headers=body.headers,
    )
    return JSONResponse(
        shapes.mail_message(message, folder_id=ctx.state.folder_id(message.owner_id, "inbox")),
        status_code=201,
    )


def _time(value: str | None, ctx: EmulatorContext) -> datetime | None:
    try:
        return resolve_time(value, ctx.clock.now())
    except ValueError as exc:
        raise bad_request(str(exc)) from None

"""Graph v1.0 /subscriptions: create (after the validation handshake), list, get, renew, reauthorize
and delete change-notification subscriptions for chat messages and the Inbox.

Read, not run (Graph's subscription API pages): create answers 201 with the subscription; update
(PATCH, "renew") 200; delete and reauthorize 204. List returns the subscriptions the calling app
created, for a delegated token those of the signed-in user.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse

from emulator.bodies import json_object
from emulator.channel_subscriptions import resolve_target
from emulator.context import EmulatorContext, context_of
from emulator.errors import bad_request, forbidden, not_found
from emulator.graph_auth import Caller, graph_caller
from emulator.subscriptions import (
    ResourceRef,
    Subscription,
    Watched,
    check_client_state,
    check_lifetime,
    check_notification_url,
    check_permission,
    check_quota,
    parse_change_types,
    parse_resource,
)
from emulator.timestamps import parse_iso, teams_time

router = APIRouter(prefix="/v1.0")


@router.post("/subscriptions", status_code=201)
async def create(request: Request, caller: Caller = Depends(graph_caller("other"))) -> JSONResponse:
    ctx = context_of(request)
    engine = ctx.subscriptions
    engine.bind()
    policy = engine.policy
    body = await json_object(request)
    if not policy.enabled:
        raise bad_request(
            "Change notifications are switched off in this tenant's seed (subscriptions.enabled).",
            "InvalidRequest",
        )
    resource = body.get("resource")
    if not isinstance(resource, str) or not resource.strip():
        raise bad_request("resource is required.", "InvalidRequest")
    ref = _resolve(ctx, caller, resource)
    check_permission(
        ref.kind, delegated=caller.user_id is not None, scopes=caller.scopes, roles=caller.roles
    )
    if body.get("includeResourceData") is True:
        raise bad_request(
            "includeResourceData is not supported here: delegated chatMessage subscriptions never "
            "carry resource data, and this emulator sends basic notifications only.",
            "InvalidRequest",
        )
    change_types = parse_change_types(body.get("changeType"), ref.kind)
    url = check_notification_url(body.get("notificationUrl"), policy)
    lifecycle = body.get("lifecycleNotificationUrl")
    lifecycle_url = (
        None
        if lifecycle is None
        else check_notification_url(lifecycle, policy, "lifecycleNotificationUrl")
    )
    client_state = check_client_state(body.get("clientState"))
    expiration = _expiration(body)
    now = ctx.clock.now()
    check_lifetime(
        ref.kind, expiration, now, has_lifecycle_url=lifecycle_url is not None, policy=policy
    )
    check_quota(ref, caller.app_id, engine.active(), policy)
    await engine.notifier.validate(url)
    if lifecycle_url is not None:  # both endpoints are validated (lifecycle notifications page)
        await engine.notifier.validate(lifecycle_url)
    check_quota(ref, caller.app_id, engine.active(), policy)  # others may have subscribed meanwhile
    sub = Subscription(
        id=str(uuid.uuid4()),
        resource=resource,
        ref=ref,
        change_types=change_types,
        notification_url=url,
        lifecycle_url=lifecycle_url,
        client_state=client_state,
        expiration=expiration,
        app_id=caller.app_id,
        creator_id=caller.user_id or caller.app_id,
        delegated=caller.user_id is not None,
        token_expiry=_token_expiry(request, ctx),
    )
    engine.put(sub)
    return JSONResponse(_shape(sub, ctx, request, entity=True), status_code=201)


@router.get("/subscriptions")
async def list_subscriptions(
    request: Request, caller: Caller = Depends(graph_caller("other"))
) -> JSONResponse:
    ctx = context_of(request)
    ctx.subscriptions.bind()
    mine = [s for s in ctx.subscriptions.active() if _owned(s, caller)]
    return JSONResponse(
        {
            "@odata.context": ctx.odata_context(request, "subscriptions"),
            "value": [_shape(s, ctx, request) for s in mine],
        }
    )


@router.get("/subscriptions/{sub_id}")
async def get_subscription(
    sub_id: str, request: Request, caller: Caller = Depends(graph_caller("other"))
) -> JSONResponse:
    ctx = context_of(request)
    return JSONResponse(_shape(_find(ctx, sub_id, caller), ctx, request, entity=True))


@router.patch("/subscriptions/{sub_id}")
async def renew(
    sub_id: str, request: Request, caller: Caller = Depends(graph_caller("other"))
) -> JSONResponse:
    ctx = context_of(request)
    engine = ctx.subscriptions
    sub = _find(ctx, sub_id, caller)
    body = await json_object(request)
    unknown = body.names_other_than({"expirationDateTime", "notificationUrl"})
    if unknown:
        raise bad_request(
            f"Only expirationDateTime and notificationUrl can be updated, not {sorted(unknown)}.",
            "InvalidRequest",
        )
    expiration = _expiration(body)
    check_lifetime(
        sub.ref.kind,
        expiration,
        ctx.clock.now(),
        has_lifecycle_url=sub.lifecycle_url is not None,
        policy=engine.policy,
    )
    url = sub.notification_url
    if "notificationUrl" in body and body["notificationUrl"] != url:
        url = check_notification_url(body["notificationUrl"], engine.policy)
        await engine.notifier.validate(url)
    if engine.get(sub_id) is None:
        raise not_found(f"The object was not found: subscription '{sub_id}'.", "ResourceNotFound")
    # A renewal also reauthorizes (lifecycle notifications page).
    renewed = sub.renewed(expiration, url, _token_expiry(request, ctx))
    engine.put(renewed)
    return JSONResponse(_shape(renewed, ctx, request, entity=True))


@router.post("/subscriptions/{sub_id}/reauthorize", status_code=204)
async def reauthorize(
    sub_id: str, request: Request, caller: Caller = Depends(graph_caller("other"))
) -> Response:
    ctx = context_of(request)
    sub = _find(ctx, sub_id, caller)
    ctx.subscriptions.put(sub.reauthorized(_token_expiry(request, ctx)))
    return Response(status_code=204)


@router.delete("/subscriptions/{sub_id}", status_code=204)
async def delete(
    sub_id: str, request: Request, caller: Caller = Depends(graph_caller("other"))
) -> Response:
    ctx = context_of(request)
    _find(ctx, sub_id, caller)
    ctx.subscriptions.remove(sub_id)
    return Response(status_code=204)


def _resolve(ctx: EmulatorContext, caller: Caller, resource: str) -> ResourceRef:
    kind, raw = parse_resource(resource)
    if kind in (Watched.CHANNEL, Watched.TEAM_CHANNELS):
        assert raw is not None
        teams = ctx.state.teams
        return ResourceRef(kind, resolve_target(teams, kind.value, raw, caller.user_id))
    if kind is Watched.CHAT:
        assert raw is not None
        ctx.state.readable_chat(raw, caller.user_id)  # 404 for no such chat, 403 for a non-member
        return ResourceRef(kind, raw)
    user_id = caller.me() if raw is None else raw
    user = ctx.seed.find_user(user_id)
    if user is None:
        raise not_found(
            f"Resource '{user_id}' does not exist or one of its queried reference-property objects "
            "are not present.",
            "Request_ResourceNotFound",
        )
    if caller.user_id is not None and caller.user_id != user.id:
        raise forbidden(
            "Operation: Create; Exception: [Status Code: Forbidden; Reason: A delegated token can only "
            "subscribe to the signed-in user's own resources.]",
            "ExtensionError",
        )
    return ResourceRef(kind, user.id)


def _expiration(body: dict[str, Any]) -> datetime:
    value = body.get("expirationDateTime")
    if not isinstance(value, str):
        raise bad_request("expirationDateTime is required.", "InvalidRequest")
    try:
        return parse_iso(value)
    except ValueError:
        raise bad_request(
            f"expirationDateTime '{value}' is not an ISO-8601 instant with a zone.",
            "InvalidRequest",
        ) from None


def _token_expiry(request: Request, ctx: EmulatorContext) -> datetime:
    """The expiry of the bearer token of this (already authenticated) request."""
    token = request.headers.get("authorization", "").partition(" ")[2].strip()
    return datetime.fromtimestamp(float(ctx.tokens.decode(token)["exp"]), timezone.utc)


def _owned(sub: Subscription, caller: Caller) -> bool:
    return sub.app_id == caller.app_id and (
        caller.user_id is None or sub.creator_id == caller.user_id
    )


def _find(ctx: EmulatorContext, sub_id: str, caller: Caller) -> Subscription:
    ctx.subscriptions.bind()
    sub = ctx.subscriptions.get(sub_id)
    if sub is None or not _owned(sub, caller):
        raise not_found(f"The object was not found: subscription '{sub_id}'.", "ResourceNotFound")
    return sub


def _shape(
    sub: Subscription, ctx: EmulatorContext, request: Request, *, entity: bool = False
) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if entity:
        body["@odata.context"] = ctx.odata_context(request, "subscriptions", entity=True)
    body.update(
        {
            "id": sub.id,
            "resource": sub.resource,
            "applicationId": sub.app_id,
            "changeType": sub.change_type_text,
            "clientState": sub.client_state,
            "notificationUrl": sub.notification_url,
            "notificationQueryOptions": None,
            "lifecycleNotificationUrl": sub.lifecycle_url,
            "expirationDateTime": teams_time(sub.expiration),
            "creatorId": sub.creator_id,
            "includeResourceData": False,
            "latestSupportedTlsVersion": "v1_2",
            "encryptionCertificate": None,
            "encryptionCertificateId": None,
            "notificationUrlAppId": None,
        }
    )
    return body

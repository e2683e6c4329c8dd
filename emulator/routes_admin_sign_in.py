"""Admin controls over people's sign-ins: what a person does at the device-code page, done by a test.

``POST /_emulator/devicecodes/approve {"user_code", "user"}`` signs the pending code in as that seeded
person (``"decline": true`` refuses it instead); ``GET /_emulator/devicecodes`` lists the codes not yet
expired, so a test that did not see the code printed can still find it. ``GET
/_emulator/refresh_tokens`` says how many refresh tokens were redeemed: how often a fleet refreshed.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from emulator.context import context_of
from emulator.errors import bad_request
from emulator.timestamps import teams_time

router = APIRouter(prefix="/_emulator")


class DeviceCodeDecision(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user_code: str = Field(min_length=1)
    user: str | None = None  # id or UPN of the person signing in; not needed to decline
    decline: bool = False


@router.post("/devicecodes/approve", status_code=201)
async def decide_device_code(body: DeviceCodeDecision, request: Request) -> dict[str, Any]:
    ctx = context_of(request)
    user_id: str | None = None
    if not body.decline:
        user = ctx.seed.find_user(body.user) if body.user else None
        if user is None:
            raise bad_request(
                f"name the person signing in: {body.user!r} is not a user of the tenant"
            )
        if user.is_agent_user:
            raise bad_request(
                f"{user.user_principal_name} is an agent user; agent users cannot sign in "
                "interactively"
            )
        user_id = user.id
    try:
        decided = ctx.device_codes.decide(
            body.user_code, ctx.clock.now(), user_id=user_id, declined=body.decline
        )
    except LookupError as exc:
        raise bad_request(str(exc)) from exc
    return {
        "user_code": decided.user_code,
        "state": decided.standing(ctx.clock.now()).value,
        "user_id": user_id,
    }


@router.get("/devicecodes")
async def list_device_codes(request: Request) -> dict[str, Any]:
    ctx = context_of(request)
    now = ctx.clock.now()
    return {
        "device_codes": [
            {
                "user_code": a.user_code,
                "client_id": a.client_id,
                "scope": a.scope,
                "state": a.standing(now).value,
                "expires_at": teams_time(a.expires_at),
            }
            for a in ctx.device_codes.listed(now)
        ]
    }


@router.get("/refresh_tokens")
async def refresh_token_use(request: Request) -> dict[str, int]:
    return {"redeemed": context_of(request).refresh_tokens.redeemed}

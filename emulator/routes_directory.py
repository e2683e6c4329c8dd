"""Graph v1.0 directory reads: the signed-in user, any user by id or UPN, and an agent identity's sponsors."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from emulator import shapes
from emulator.context import context_of
from emulator.errors import forbidden, not_found
from emulator.graph_auth import Caller, graph_caller

router = APIRouter(prefix="/v1.0")
READ_SELF = {
    "User.Read",
    "User.ReadWrite",
    "User.ReadBasic.All",
    "User.Read.All",
    "Directory.Read.All",
}
READ_OTHERS = {"User.ReadBasic.All", "User.Read.All", "User.ReadWrite.All", "Directory.Read.All"}
READ_OTHERS_APP = {"User.Read.All", "User.ReadWrite.All", "Directory.Read.All"}
# "List agentIdentity sponsors" (Graph v1.0): Application: AgentIdentity.ReadWrite.All, and no other;
# Delegated (work or school account): Not supported.
READ_SPONSORS_APP = frozenset({"AgentIdentity.ReadWrite.All"})
# The emulator's old, kinder rule, kept behind the seed's sponsors_delegated switch.
READ_SPONSORS_LENIENT = READ_OTHERS | {"Application.Read.All", "AgentIdentity.Read.All"}


@router.get("/me")
async def me(request: Request, caller: Caller = Depends(graph_caller("other"))) -> JSONResponse:
    ctx = context_of(request)
    user_id = caller.me()
    caller.require(READ_SELF, workload="directory")
    user = ctx.seed.find_user(user_id)
    assert user is not None  # tokens are only minted for seeded users
    return JSONResponse(
        {
            "@odata.context": f"{ctx.graph_base(request)}/$metadata#users/$entity",
            **shapes.user(user),
        }
    )


@router.get("/users/{user_ref}")
async def get_user(
    user_ref: str, request: Request, caller: Caller = Depends(graph_caller("other"))
) -> JSONResponse:
    ctx = context_of(request)
    user = ctx.seed.find_user(user_ref)
    if user is not None and user.id == caller.user_id:
        caller.require(READ_SELF, workload="directory")
    else:
        caller.require(READ_OTHERS, READ_OTHERS_APP, workload="directory")
    if user is None:
        raise not_found(
            f"Resource '{user_ref}' does not exist or one of its queried reference-property objects "
            "are not present.",
            "Request_ResourceNotFound",
        )
    return JSONResponse(
        {
            "@odata.context": f"{ctx.graph_base(request)}/$metadata#users/$entity",
            **shapes.user(user),
        }
    )


@router.get("/servicePrincipals/{identity_id}/sponsors")
@router.get("/servicePrincipals/{identity_id}/microsoft.graph.agentIdentity/sponsors")
@router.get("/agentIdentities/{identity_id}/sponsors")
async def sponsors(
    identity_id: str, request: Request, caller: Caller = Depends(graph_caller("other"))
) -> JSONResponse:
    ctx = context_of(request)
    if ctx.seed.sponsors_delegated:
        caller.require(
            READ_SPONSORS_LENIENT, READ_SPONSORS_APP | READ_OTHERS_APP, workload="directory"
        )
    elif caller.user_id is not None:
        raise forbidden(
            "Delegated permissions are not supported for listing agent identity sponsors; call "
            "with an application token holding AgentIdentity.ReadWrite.All.",
            "Authorization_RequestDenied",
        )
    else:
        caller.require(frozenset(), READ_SPONSORS_APP, workload="directory")
    identity = ctx.seed.find_agent_identity(identity_id)
    if identity is None:
        raise not_found(
            f"Resource '{identity_id}' does not exist or one of its queried reference-property objects "
            "are not present.",
            "Request_ResourceNotFound",
        )
    # The documented answer is a collection of directoryObject: each sponsor's id (and, in the "typed"
    # shape, its type), not its profile (a client reads a user's UPN and mail from /users/{id}).
    refs = [
        ("#microsoft.graph.user", ref_user.id)
        for ref in identity.sponsors
        if (ref_user := ctx.seed.find_user(ref)) is not None
    ]
    refs += [("#microsoft.graph.group", group) for group in identity.group_sponsors]
    typed = ctx.seed.sponsors_shape == "typed"
    value = [
        {"@odata.type": kind, "id": ref_id, "deletedDateTime": None} if typed else {"id": ref_id}
        for kind, ref_id in refs
    ]
    return JSONResponse(
        {"@odata.context": f"{ctx.graph_base(request)}/$metadata#directoryObjects", "value": value}
    )

"""Who is calling Graph: the bearer token checked as Graph checks it, the app's throttling budget,
and the permission checks routes make (with the error each Graph workload gives).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Literal

from fastapi import Request

from emulator.context import EmulatorContext, context_of
from emulator.errors import bad_request, forbidden, too_many_requests, unauthenticated
from emulator.grants import GRAPH_APP_ID, GRAPH_AUDIENCE
from emulator.team_throttle import TEAMS_KINDS, teams_charges
from emulator.throttle import Charge
from emulator.tokens import InvalidToken

Workload = Literal["teams", "outlook", "directory"]
# Which of Graph's limits a route is counted against (see emulator.throttle and the seed's budget).
# "chat_messages": a chat's messages (reads also count per chat); "chats": list or get chat (also per
# user); "mail": a mailbox (rate and concurrency per mailbox); "other": everything else.
RequestKind = Literal[
    "chat_messages",
    "chats",
    "mail",
    "other",
    # Teams' team and channel routes (emulator.team_throttle): GET /teams/{id} and joinedTeams; GET
    # /teams/{id}/channels; a channel's messages (reads and sends counted apart).
    "teams",
    "team_channels",
    "channel_messages",
]
# The claims challenge of a CAE revocation: {"access_token":{"nbf":{"essential":true}}}, base64.
_CAE_CLAIMS = "eyJhY2Nlc3NfdG9rZW4iOnsibmJmIjp7ImVzc2VudGlhbCI6dHJ1ZX19fQ=="


@dataclass(frozen=True)
class Caller:
    app_id: str
    user_id: str | None  # None for an app-only token
    scopes: frozenset[str]
    roles: frozenset[str]

    def me(self) -> str:
        """The signed-in user; /me needs a delegated token."""
        if self.user_id is None:
            raise bad_request("/me request is only valid with delegated authentication flow.")
        return self.user_id

    def require(
        self,
        delegated: AbstractSet[str],
        application: AbstractSet[str] = frozenset(),
        workload: Workload = "teams",
    ) -> None:
        held = self.scopes if self.user_id is not None else self.roles
        wanted = delegated if self.user_id is not None else application
        if held & wanted:
            return
        if workload == "outlook":
            raise forbidden(
                "Access is denied. Check credentials and try again.", "ErrorAccessDenied"
            )
        if workload == "directory":
            raise forbidden(
                "Insufficient privileges to complete the operation.", "Authorization_RequestDenied"
            )
        kind = "scope" if self.user_id is not None else "role"
        raise forbidden(
            f"Missing {kind} permissions on the request. API requires one of "
            f"'{', '.join(sorted(wanted)) or '(none for this token type)'}'. "
            f"{kind.capitalize()}s on the request '{', '.join(sorted(held))}'"
        )


def authenticate(request: Request, ctx: EmulatorContext) -> Caller:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise unauthenticated("Access token is empty.")
    if token.count(".") != 2:
        raise unauthenticated(
            "IDX14100: JWT is not well formed, there are no dots (.). The token needs to be in "
            "JWS or JWE Compact Serialization Format."
        )
    try:
        claims = ctx.tokens.decode(token)
    except InvalidToken:
        raise unauthenticated("Access token validation failure. Invalid signature.") from None
    # The audience first: a token for another resource (Storage's, with its v1 issuer) is refused for
    # being someone else's, not for an issuer Graph never expected of it.
    if claims.get("aud") not in (GRAPH_AUDIENCE, GRAPH_AUDIENCE + "/", GRAPH_APP_ID):
        raise unauthenticated("Access token validation failure. Invalid audience.")
    if claims.get("iss") != ctx.issuer(request) or claims.get("tid") != ctx.seed.tenant_id:
        raise unauthenticated("Access token validation failure. Invalid issuer.")
    now = ctx.clock.now().timestamp()
    if float(claims.get("nbf", 0)) > now:
        raise unauthenticated("Lifetime validation failed, the token is not yet valid.")
    if ctx.tokens.is_expired(claims):
        raise unauthenticated("Lifetime validation failed, the token is expired.")
    if ctx.tokens.is_revoked(claims):
        err = unauthenticated(
            "Continuous access evaluation resulted in challenge with result: InteractionRequired "
            "and code: TokenIssuedBeforeRevocationTimestamp"
        )
        err.headers["WWW-Authenticate"] += f', error="insufficient_claims", claims="{_CAE_CLAIMS}"'
        raise err
    is_user = claims.get("idtyp") == "user"
    return Caller(
        # The calling app, which Graph's limits are counted per: appid in v1.0 tokens, azp in v2.0 ones
        # (read, not run: the Microsoft identity platform's access token claims reference). An app named
        # in neither would be counted with every other such app, so only a token without both is "".
        app_id=str(claims.get("appid") or claims.get("azp") or ""),
        user_id=str(claims["oid"]) if is_user else None,
        scopes=frozenset(str(claims.get("scp", "")).split()) if is_user else frozenset(),
        roles=frozenset(claims.get("roles", [])) if not is_user else frozenset(),
    )


def graph_caller(kind: RequestKind) -> Callable[[Request], AsyncIterator[Caller]]:
    """A dependency: authenticate, note the caller for statistics, spend from every limit that covers
    the request (holding a mailbox concurrency slot until the response), and wait while an admin hold
    matches."""

    async def dependency(request: Request) -> AsyncIterator[Caller]:
        ctx = context_of(request)
        caller = authenticate(request, ctx)
        request.state.app_id = caller.app_id
        request.state.user_id = caller.user_id
        charges = _charges(kind, request, caller, ctx)
        retry_after = ctx.throttle.admit(caller.app_id, charges)
        if retry_after is not None:
            request.state.throttled = True
            raise too_many_requests(retry_after)
        try:
            await ctx.holds.wait(request.url.path)
            yield caller
        finally:
            ctx.throttle.release(caller.app_id, charges)

    return dependency


def _charges(
    kind: RequestKind, request: Request, caller: Caller, ctx: EmulatorContext
) -> list[Charge]:
    if kind in TEAMS_KINDS:
        return [Charge(limit, key) for limit, key in teams_charges(kind, request)]
    if kind == "chat_messages" and request.method == "GET":
        return [
            Charge("chat_message_reads"),
            Charge("per_chat", request.path_params.get("chat_id", "")),
        ]
    if kind == "chat_messages":
        return [Charge("chat_message_sends")]
    if kind == "chats":
        # Per user: the signed-in user's chats; an app-only caller is counted as itself.
        return [Charge("chats_per_user", caller.user_id or ""), Charge("other")]
    if kind == "mail":
        ref = request.path_params.get("user_ref")
        user = ctx.seed.find_user(ref) if ref else None
        mailbox = user.id if user is not None else (caller.user_id or ref or "")
        return [Charge("mail_per_mailbox", mailbox), Charge("mail_concurrency", mailbox)]
    return [Charge("other")]


def include_unknown_enum_members(request: Request) -> bool:
    prefer = request.headers.get("prefer", "")
    return any(p.strip().lower() == "include-unknown-enum-members" for p in prefer.split(","))

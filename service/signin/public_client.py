"""The fleet as a public client of Entra: ask for a device code, redeem it, redeem a refresh token.

Microsoft identity platform pages relied on (read, not run against Entra; the emulator implements
them, emulator/sign_in_grants.py): "OAuth 2.0 device authorization grant" — POST
``/{tenant}/oauth2/v2.0/devicecode`` (client_id, scope) answers device_code, user_code,
verification_uri, expires_in, interval and message; the token endpoint, polled with grant_type
``urn:ietf:params:oauth:grant-type:device_code``, answers authorization_pending until the person signs
in, then the tokens; authorization_declined, expired_token and bad_verification_code end the flow
(RFC 8628 adds slow_down: wait 5 s longer). "Refresh tokens in the Microsoft identity platform" — a
refresh token is redeemed with grant_type refresh_token for any consented scope, and the answer
carries a fresh refresh token (the old one is not revoked). A public client sends no secret.

Why not MSAL Python (or azure-identity's DeviceCodeCredential, built on it): the reasons
service/graph/auth/token_endpoint.py gives for the agent-user hops hold here too (https authorities
only, so not the emulator; synchronous; its own cache), and two more: its persistent cache
(msal-extensions) is a file on one machine, encrypted with that machine's keyring, where the fleet
needs one record every replica reads; and its silent acquisition refreshes on whichever replica
calls it near expiry, where the fleet lets one lease holder refresh (``service.signin.provider``).
The POSTs go through ``TokenEndpoint.request``: the same retries, metrics and redaction as the hops.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import httpx

from service.graph.auth.token_endpoint import EntraAnswer, TokenEndpoint, entra_error, token_url
from service.signin.record import CachedToken
from service.telemetry.metrics import GraphMetrics

DEVICE_CODE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
# Asked with every sign-in: offline_access for the refresh token, openid and profile as Entra expects.
SIGN_IN_EXTRA_SCOPES = ("offline_access", "openid", "profile")
_METRIC = "signed_in_person"
# Fields whose values are credentials: redacted from anything Entra echoes back.
_SECRETS = ("device_code", "refresh_token")


def sign_in_scope(resource_scopes: str) -> str:
    """What a sign-in asks for: the resource scopes plus the three that bring a refresh token."""
    asked = resource_scopes.split()
    return " ".join([*asked, *(s for s in SIGN_IN_EXTRA_SCOPES if s not in asked)])


@dataclass(frozen=True)
class DeviceCode:
    user_code: str
    verification_uri: str
    message: str
    expires_in_s: float
    interval_s: float
    device_code: str = field(repr=False)


@dataclass(frozen=True)
class TokenGrant:
    access_token: str = field(repr=False)
    expires_on: float  # seconds since the epoch, counted from when the request was sent
    refresh_token: str | None = field(repr=False)
    scope: str
    obtained_at: float  # when the request was sent

    def cached(self) -> CachedToken:
        return CachedToken(self.access_token, self.expires_on, self.obtained_at)


class Pending(str, Enum):
    """Polling a device code: not yet (``AUTHORIZATION_PENDING``), or not so often (``SLOW_DOWN``)."""

    AUTHORIZATION_PENDING = "authorization_pending"
    SLOW_DOWN = "slow_down"


class SignInRefused(Exception):
    """Entra's verdict against the request (a 4xx): the flow or the refresh token is over.

    ``error`` is the OAuth error (``invalid_grant``, ``expired_token``…), ``code`` the AADSTS code;
    the message carries Entra's description with anything we sent redacted."""

    def __init__(
        self, message: str, *, error: str | None, code: str | None, status: int | None
    ) -> None:
        super().__init__(message)
        self.error = error
        self.code = code
        self.status = status


class EntraUnreachable(Exception):
    """No verdict: no answer, a 5xx or a 429 after the bounded retries. Trying later may work."""


class PublicClient:
    def __init__(
        self,
        http: httpx.AsyncClient,
        authority: str,
        tenant_id: str,
        client_id: str,
        *,
        clock: Callable[[], float],
        metrics: GraphMetrics,
        sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        self.client_id = client_id
        extra: dict[str, Any] = {
            "metrics": metrics,
            "clock": clock,
            **({"sleep": sleep} if sleep else {}),
        }
        self._token = TokenEndpoint(http, token_url(authority, tenant_id), **extra)
        self._devicecode = TokenEndpoint(
            http, f"{authority.rstrip('/')}/{tenant_id}/oauth2/v2.0/devicecode", **extra
        )

    @property
    def token_url(self) -> str:
        return self._token.url

    async def start_device_code(self, scope: str) -> DeviceCode:
        answer = await self._post(
            self._devicecode, {"client_id": self.client_id, "scope": scope}, "device code"
        )
        body = _object(answer)
        try:
            return DeviceCode(
                str(body["user_code"]),
                str(body["verification_uri"]),
                str(body.get("message", "")),
                float(body["expires_in"]),
                float(body.get("interval", 5)),
                str(body["device_code"]),
            )
        except (KeyError, TypeError, ValueError):
            raise EntraUnreachable(
                f"{self._devicecode.url} answered 200 without a device code; check "
                "ENTRABOT_AUTHORITY"
            ) from None

    async def poll_device_code(self, code: DeviceCode) -> TokenGrant | Pending:
        form = {
            "grant_type": DEVICE_CODE_GRANT,
            "client_id": self.client_id,
            "device_code": code.device_code,
        }
        answer = await self._token.request(_METRIC, _static(form), span="Entra device code poll")
        if answer.status is not None and answer.status >= 400 and isinstance(answer.body, dict):
            error = answer.body.get("error")
            if error in (Pending.AUTHORIZATION_PENDING.value, Pending.SLOW_DOWN.value):
                return Pending(error)
        return _grant(self._verdict(answer, self._token, "device code sign-in"), answer.started)

    async def redeem_refresh_token(self, refresh_token: str, scope: str) -> TokenGrant:
        form = {
            "grant_type": "refresh_token",
            "client_id": self.client_id,
            "refresh_token": refresh_token,
            "scope": scope,
        }
        answer = await self._post(self._token, form, "refresh")
        return _grant(_object(answer), answer.started)

    async def _post(
        self, endpoint: TokenEndpoint, form: Mapping[str, str], what: str
    ) -> EntraAnswer:
        answer = await endpoint.request(_METRIC, _static(form), span=f"Entra {what}")
        self._verdict(answer, endpoint, what)
        return answer

    def _verdict(self, answer: EntraAnswer, endpoint: TokenEndpoint, what: str) -> dict[str, Any]:
        """The 200 body; a 4xx is SignInRefused, anything else EntraUnreachable."""
        if answer.status == 200:
            return _object(answer)
        if answer.status is None or answer.status >= 500 or answer.status == 429:
            reason = (
                f"HTTP {answer.status}"
                if answer.status is not None
                else f"no answer ({answer.body})"
            )
            raise EntraUnreachable(
                f"{what} at {endpoint.url}: {reason} after retries; check ENTRABOT_AUTHORITY "
                "and the network path to it"
            )
        code, description = entra_error(
            answer.body, {k: v for k, v in answer.form.items() if k in _SECRETS}
        )
        error = answer.body.get("error") if isinstance(answer.body, dict) else None
        said = (
            f"{code}: {description}"
            if code and description
            else (description or f"HTTP {answer.status}")
        )
        raise SignInRefused(
            f"Entra refused the {what} ({error or answer.status}) — {said}",
            error=error,
            code=code,
            status=answer.status,
        )


def _static(form: Mapping[str, str]) -> Callable[[], Awaitable[Mapping[str, str]]]:
    async def build() -> Mapping[str, str]:
        return form

    return build


def _object(answer: EntraAnswer) -> dict[str, Any]:
    return answer.body if isinstance(answer.body, dict) else {}


def _grant(body: Mapping[str, Any], started: float) -> TokenGrant:
    token, expires_in = body.get("access_token"), body.get("expires_in")
    try:
        lifetime = float(expires_in) if isinstance(expires_in, (int, float, str)) else -1.0
    except ValueError:
        lifetime = -1.0
    if not isinstance(token, str) or not token or not (0 < lifetime < math.inf):
        raise EntraUnreachable(
            "the token endpoint answered 200 without a usable access_token and expires_in; "
            "check ENTRABOT_AUTHORITY"
        )
    refresh = body.get("refresh_token")
    scope = body.get("scope")
    return TokenGrant(
        token,
        started + lifetime,
        refresh if isinstance(refresh, str) and refresh else None,
        scope if isinstance(scope, str) else "",
        started,
    )

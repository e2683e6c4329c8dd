"""A person's sign-in at the token endpoint: the device authorization grant and the refresh-token grant.

Both are for public clients (an app registration with "Allow public client flows"), as Microsoft's
"OAuth 2.0 device authorization grant" and "Refresh tokens" pages describe them (read, not run against
Entra; see emulator.device_codes and emulator.refresh_tokens). AADSTS numbers: 70016 pending, 70018 a
device code not recognised, 70019 expired (Entra's error code reference); 50173 a revoked grant,
700082 a refresh token expired by inactivity, 9002313 a malformed one. Entra publishes no number for
``authorization_declined``: 70000 (its generic invalid grant) stands in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from emulator.clock import Clock
from emulator.device_codes import DeviceAuthorizations, Standing
from emulator.errors import EntraError, required_param
from emulator.refresh_tokens import Redemption, RefreshTokens
from emulator.seed import Seed, SeedApp, SeedUser

if TYPE_CHECKING:
    from emulator.grants import Endpoint, TokenGrantor

DEVICE_CODE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
DECLINED_CODE = 70000  # see the module docstring
VERIFICATION_PATH = "/devicelogin"  # Entra's is https://microsoft.com/devicelogin


class SignInGrants:
    def __init__(
        self,
        grantor: TokenGrantor,
        seed: Seed,
        device_codes: DeviceAuthorizations,
        refresh_tokens: RefreshTokens,
        clock: Clock,
    ) -> None:
        self._grantor = grantor
        self._seed = seed
        self._codes = device_codes
        self._refresh = refresh_tokens
        self._clock = clock

    # --- POST /{tenant}/oauth2/v2.0/devicecode ---

    def start_device_authorization(self, params: Mapping[str, str], ep: Endpoint) -> dict[str, Any]:
        app = self._grantor.public_app(required_param(params, "client_id"))
        scope = required_param(params, "scope")
        self._grantor.scope_of(
            scope
        )  # a scope Entra would refuse is refused now, not after the sign-in
        pending = self._codes.start(app.app_id, scope, self._clock.now())
        uri = ep.authority + VERIFICATION_PATH
        return {
            "user_code": pending.user_code,
            "device_code": pending.device_code,
            "verification_uri": uri,
            "expires_in": self._codes.lifetime_s,
            "interval": self._codes.interval_s,
            "message": f"To sign in, use a web browser to open the page {uri} and enter the code "
            f"{pending.user_code} to authenticate.",
        }

    # --- the token endpoint's two grants ---

    def redeem_device_code(
        self, params: Mapping[str, str], app: SeedApp, ep: Endpoint
    ) -> dict[str, Any]:
        standing, found = self._codes.redeem(
            required_param(params, "device_code"), self._clock.now()
        )
        if found is not None and found.client_id != app.app_id:
            standing = Standing.UNKNOWN  # another client's code is not one this client was given
        if standing is Standing.PENDING:
            raise EntraError(
                "authorization_pending",
                70016,
                "OAuth 2.0 device flow error. Authorization is pending. Continue polling.",
            )
        if standing is Standing.DECLINED:
            raise EntraError(
                "authorization_declined",
                DECLINED_CODE,
                "The end user denied the authorization request.",
            )
        if standing is Standing.EXPIRED:
            raise EntraError(
                "expired_token",
                70019,
                "Verification code expired. Have the user retry the sign-in.",
            )
        if standing is Standing.REDEEMED:
            raise EntraError(
                "invalid_grant", 70000, "The provided device code was already redeemed."
            )
        if standing is Standing.UNKNOWN or found is None or found.user_id is None:
            raise EntraError("bad_verification_code", 70018, "The device_code was not recognised.")
        return self._tokens_for(self._user(found.user_id), app, found.scope, ep)

    def redeem_refresh_token(
        self, params: Mapping[str, str], app: SeedApp, ep: Endpoint
    ) -> dict[str, Any]:
        redemption, grant = self._refresh.redeem(
            required_param(params, "refresh_token"), self._clock.now()
        )
        if redemption is Redemption.UNKNOWN or grant is None:
            raise EntraError(
                "invalid_grant",
                9002313,
                "Invalid request. Request is malformed or invalid: the "
                "refresh token is not one this tenant issued.",
            )
        if redemption is Redemption.REVOKED:
            raise EntraError(
                "invalid_grant",
                50173,
                "The provided grant has expired due to it being revoked, a "
                "fresh auth token is needed. The user might have changed or reset their password.",
            )
        if redemption is Redemption.EXPIRED:
            raise EntraError(
                "invalid_grant", 700082, "The refresh token has expired due to inactivity."
            )
        if grant.client_id != app.app_id:
            raise EntraError(
                "invalid_grant",
                70000,
                f"The refresh token was issued to client '{grant.client_id}', not '{app.app_id}'.",
            )
        # A refresh token is tied to the user and the client, not to a resource: any consented scope.
        return self._tokens_for(
            self._user(grant.user_id),
            app,
            params.get("scope") or grant.scope,
            ep,
            always_refresh=True,
        )

    def _tokens_for(
        self,
        user: SeedUser,
        app: SeedApp,
        scope_text: str,
        ep: Endpoint,
        *,
        always_refresh: bool = False,
    ) -> dict[str, Any]:
        scope = self._grantor.scope_of(scope_text)
        body = self._grantor.signed_in_user_tokens(ep, user, app, scope)
        if scope.offline or always_refresh:
            # Each use hands out a fresh refresh token; the old one stays valid (Entra does not revoke it).
            body["refresh_token"] = self._refresh.issue(
                user.id, app.app_id, scope_text, self._clock.now()
            )
        return body

    def _user(self, user_id: str) -> SeedUser:
        user = self._seed.find_user(user_id)
        if user is None:
            raise EntraError(
                "invalid_grant",
                50034,
                f"The user account {user_id} does not exist in the "
                f"{self._seed.tenant_domain} directory.",
            )
        return user

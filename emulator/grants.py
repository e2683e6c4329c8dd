"""The token endpoint's decisions: which grant, which client, which credential, which token.

Checked the way Entra checks them, with its error classes and AADSTS codes. Codes used where Entra's
are documented; for the agent-identity relationship checks (fmi_path naming an identity that is not a
child of the blueprint, user_fic for a user that is not the identity's agent user) Entra's code is not
published and AADSTS82001 stands in. Every error names the grant, the client and its role, so a caller
can tell which of the three agent-user hops failed.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from emulator.clock import Clock
from emulator.device_codes import DeviceAuthorizations
from emulator.errors import EntraError, required_param
from emulator.refresh_tokens import RefreshTokens
from emulator.seed import TOKEN_EXCHANGE_AUDIENCE, AgentIdentity, Seed, SeedApp, SeedUser
from emulator.sign_in_grants import DEVICE_CODE_GRANT, SignInGrants
from emulator.tokens import InvalidToken, TokenService, b64url

JWT_BEARER = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
GRAPH_AUDIENCE = "https://graph.microsoft.com"
GRAPH_APP_ID = "00000003-0000-0000-c000-000000000000"
STORAGE_AUDIENCE = "https://storage.azure.com"
AGENT_ID_CODE = 82001  # see module docstring
_OIDC_SCOPES = {"openid", "profile", "offline_access", "email"}
_RESOURCES = {
    GRAPH_AUDIENCE: GRAPH_AUDIENCE,
    GRAPH_APP_ID: GRAPH_AUDIENCE,
    STORAGE_AUDIENCE: STORAGE_AUDIENCE,
    TOKEN_EXCHANGE_AUDIENCE: TOKEN_EXCHANGE_AUDIENCE,
}


@dataclass(frozen=True)
class Endpoint:
    """Where the request arrived: the authority base URL and the tenant in the path."""

    authority: str
    tenant_id: str

    @property
    def token_endpoint(self) -> str:
        return f"{self.authority}/{self.tenant_id}/oauth2/v2.0/token"

    @property
    def issuer(self) -> str:
        return f"{self.authority}/{self.tenant_id}/v2.0"


def v1_issuer(tenant_id: str) -> str:
    """The issuer of v1.0 access tokens: Entra's STS for the tenant, whichever endpoint issued them.

    Azure Storage, a Microsoft API, takes v1.0 tokens, so its tokens carry this issuer (read, not run:
    learn.microsoft.com/entra/identity-platform/access-tokens, "v1.0 ... iss https://sts.windows.net/{tid}/").
    Azurite's ``--oauth basic`` accepts only issuers under https://sts.windows.net/ and a few sovereign
    clouds (azurite/node_modules/azurite/dist/src/common/utils/constants.js, VALID_ISSUE_PREFIXES)."""
    return f"https://sts.windows.net/{tenant_id}/"


@dataclass(frozen=True)
class Scope:
    resource: str  # the token audience
    names: tuple[str, ...] | None  # None for "/.default"
    oidc: bool  # openid was asked for: answer with an id_token and client_info
    offline: bool = False  # offline_access was asked for: answer with a refresh token too


@dataclass(frozen=True)
class _Client:
    client_id: str
    role: str  # how errors name it
    app: SeedApp | None = None
    identity: AgentIdentity | None = None


class TokenGrantor:
    def __init__(
        self,
        seed: Seed,
        tokens: TokenService,
        clock: Clock,
        *,
        device_codes: DeviceAuthorizations,
        refresh_tokens: RefreshTokens,
    ) -> None:
        self._seed = seed
        self._tokens = tokens
        self._clock = clock
        self.sign_in = SignInGrants(self, seed, device_codes, refresh_tokens, clock)
        self._certificates_by_thumbprint = {
            app.app_id: {
                kind: pem for pem in app.certificates for kind in certificate_thumbprints(pem)
            }
            for app in seed.apps
        }

    # --- entry point ---

    def grant(self, params: Mapping[str, str], endpoint: Endpoint) -> dict[str, Any]:
        if endpoint.tenant_id not in (self._seed.tenant_id, self._seed.tenant_domain):
            raise EntraError(
                "invalid_request",
                90002,
                f"Tenant '{endpoint.tenant_id}' not found. Check to make "
                "sure you have the correct tenant ID and are signing into the correct cloud.",
            )
        grant_type = required_param(params, "grant_type")
        client_id = required_param(params, "client_id")
        client = _Client(client_id, "unknown client")
        try:
            client = self._client(client_id)
            if grant_type == "client_credentials":
                return self._client_credentials(params, client, endpoint)
            if grant_type == "user_fic":
                return self._user_fic(params, client, endpoint)
            if grant_type == "password":
                return self._password(params, client, endpoint)
            if grant_type == DEVICE_CODE_GRANT:
                return self.sign_in.redeem_device_code(params, self.public_app(client), endpoint)
            if grant_type == "refresh_token":
                return self.sign_in.redeem_refresh_token(params, self.public_app(client), endpoint)
            raise EntraError(
                "unsupported_grant_type",
                70003,
                f"The app requested an unsupported grant type '{grant_type}'.",
            )
        except EntraError as err:
            err.description += f" [grant_type={grant_type}, client_id={client_id} ({client.role})]"
            raise

    def public_app(self, client: _Client | str) -> SeedApp:
        """The public client app a sign-in flow runs for (Entra: "Allow public client flows")."""
        if isinstance(client, str):
            client = self._client(client)
        if client.app is None or client.app.is_confidential:
            raise EntraError(
                "invalid_client",
                7000218,
                "The request body must contain the following parameter: "
                f"'client_assertion' or 'client_secret': '{client.client_id}' ({client.role}) is not "
                "a public client, so it cannot use a sign-in flow without a credential.",
            )
        return client.app

    def _client(self, client_id: str) -> _Client:
        app = self._seed.find_app(client_id)
        if app is not None:
            role = (
                "agent identity blueprint"
                if app.kind == "blueprint"
                else app.kind.replace("_", " ")
            )
            return _Client(client_id, role, app=app)
        identity = self._seed.find_agent_identity(client_id)
        if identity is not None:
            return _Client(client_id, "agent identity", identity=identity)
        raise EntraError(
            "unauthorized_client",
            700016,
            f"Application with identifier '{client_id}' was not "
            f"found in the directory '{self._seed.tenant_domain}'. This can happen if the "
            "application has not been installed by the administrator of the tenant or consented "
            "to by any user in the tenant. You may have sent your authentication request to the "
            "wrong tenant.",
        )

    # --- grants ---

    def _client_credentials(
        self, params: Mapping[str, str], client: _Client, ep: Endpoint
    ) -> dict[str, Any]:
        fmi_path = params.get("fmi_path")
        if client.identity is not None:
            self._authenticate_identity(params, client.identity, ep)
            scope = self._scope(params, client_credentials=True)
            if fmi_path:
                raise EntraError(
                    "unauthorized_client",
                    AGENT_ID_CODE,
                    "An agent identity cannot request a "
                    "token with fmi_path; only its agent identity blueprint can.",
                )
            identity = client.identity
            claims = self._app_claims(ep, identity.id, scope.resource, identity.app_roles, acr="2")
            claims["xms_par_app_azp"] = identity.blueprint_app_id
            return self._respond(claims, app_id=identity.id, scope=None)
        assert client.app is not None
        acr = self._authenticate_app(params, client.app, ep, require=True)
        scope = self._scope(params, client_credentials=True)
        if fmi_path:
            if client.app.kind != "blueprint":
                raise EntraError(
                    "unauthorized_client",
                    AGENT_ID_CODE,
                    f"fmi_path is only accepted from an agent "
                    f"identity blueprint; app '{client.client_id}' is a {client.role}.",
                )
            if scope.resource != TOKEN_EXCHANGE_AUDIENCE:
                raise EntraError(
                    "invalid_scope",
                    70011,
                    "A request with fmi_path must ask for scope "
                    f"'{TOKEN_EXCHANGE_AUDIENCE}/.default'.",
                )
            target = self._seed.find_agent_identity(fmi_path)
            if target is None:
                raise EntraError(
                    "unauthorized_client",
                    700016,
                    f"Application with identifier '{fmi_path}' "
                    f"(fmi_path) was not found in the directory '{self._seed.tenant_domain}'.",
                )
            if target.blueprint_app_id != client.client_id:
                raise EntraError(
                    "unauthorized_client",
                    AGENT_ID_CODE,
                    f"Agent identity '{fmi_path}' is not a "
                    f"child of agent identity blueprint '{client.client_id}'; a blueprint may only "
                    "impersonate its own agent identities.",
                )
            claims = self._app_claims(ep, client.client_id, TOKEN_EXCHANGE_AUDIENCE, (), acr=acr)
            claims["sub"] = fmi_path  # T1 names the agent identity it may be exchanged for
            return self._respond(claims, app_id=client.client_id, scope=None)
        claims = self._app_claims(
            ep, client.client_id, scope.resource, client.app.app_roles, acr=acr
        )
        return self._respond(claims, app_id=client.client_id, scope=None)

    def _user_fic(self, params: Mapping[str, str], client: _Client, ep: Endpoint) -> dict[str, Any]:
        if client.identity is None:
            raise EntraError(
                "unauthorized_client",
                AGENT_ID_CODE,
                "The user_fic grant is only available to "
                f"agent identities; '{client.client_id}' is a {client.role}.",
            )
        identity = client.identity
        self._authenticate_identity(params, identity, ep)
        self._check_instance_token(
            required_param(params, "user_federated_identity_credential"), identity
        )
        scope = self._scope(params, client_credentials=False)
        user_id, username = params.get("user_id"), params.get("username")
        if not user_id and not username:
            raise EntraError(
                "invalid_request",
                900144,
                "The request body must contain the following parameter: 'user_id' or 'username'.",
            )
        if user_id and username:
            raise EntraError(
                "invalid_request", 900144, "Send either user_id or username, not both."
            )
        ref = user_id or username or ""
        user = self._seed.find_user(ref)
        if user is None or (user_id and user.id != user_id):
            raise EntraError(
                "invalid_grant",
                50034,
                f"The user account {ref} does not exist in the "
                f"{self._seed.tenant_domain} directory. To sign into this application, the account "
                "must be added to the directory.",
            )
        if user.agent_identity_id != identity.id:
            raise EntraError(
                "invalid_grant",
                AGENT_ID_CODE,
                f"User '{user.user_principal_name}' is not the agent "
                f"user of agent identity '{identity.id}'; an agent user can only be impersonated by "
                "the agent identity that is its identity parent.",
            )
        claims = self._user_claims(
            ep,
            user,
            identity.id,
            scope,
            identity.delegated_scopes,
            display_name=identity.display_name,
        )
        claims["xms_par_app_azp"] = identity.blueprint_app_id
        return self._respond(
            claims, app_id=identity.id, user=user, scope=scope, client_id=identity.id, ep=ep
        )

    def _password(self, params: Mapping[str, str], client: _Client, ep: Endpoint) -> dict[str, Any]:
        if client.app is None:
            raise EntraError(
                "unauthorized_client",
                AGENT_ID_CODE,
                "Agent identities cannot use the password grant.",
            )
        self._authenticate_app(params, client.app, ep, require=client.app.is_confidential)
        scope = self._scope(params, client_credentials=False)
        username, password = required_param(params, "username"), required_param(params, "password")
        user = self._seed.find_user(username)
        if user is None or user.password is None or not _same(user.password, password):
            raise EntraError(
                "invalid_grant",
                50126,
                "Error validating credentials due to invalid username or password.",
            )
        claims = self._user_claims(
            ep,
            user,
            client.client_id,
            scope,
            client.app.delegated_scopes,
            display_name=client.app.display_name,
        )
        return self._respond(
            claims,
            app_id=client.client_id,
            user=user,
            scope=scope,
            client_id=client.client_id,
            ep=ep,
        )

    # --- scopes ---

    def _scope(self, params: Mapping[str, str], *, client_credentials: bool) -> Scope:
        return self.scope_of(required_param(params, "scope"), client_credentials=client_credentials)

    def scope_of(self, text: str, *, client_credentials: bool = False) -> Scope:
        raw = text.split()
        oidc = "openid" in raw
        wanted = [s for s in raw if s not in _OIDC_SCOPES]
        if not wanted:
            if client_credentials:
                raise EntraError(
                    "invalid_scope",
                    1002012,
                    f"The provided value for scope {' '.join(raw)} is "
                    "not valid. Client credential flows must have a scope value with /.default "
                    "suffixed to the resource identifier (application ID URI).",
                )
            raise EntraError(
                "invalid_scope",
                70011,
                "The provided value for the input parameter 'scope' is "
                "not valid: name a resource, e.g. https://graph.microsoft.com/.default.",
            )
        resources, names, default = set(), [], False
        for item in wanted:
            if item.endswith("/.default"):
                resources.add(item[: -len("/.default")])
                default = True
            elif "/" in item:
                resource, _, name = item.rpartition("/")
                resources.add(resource)
                names.append(name)
            else:  # a bare scope name means Graph, as Entra's v2 endpoint reads it
                resources.add(GRAPH_AUDIENCE)
                names.append(item)
        if len({_RESOURCES.get(r, r) for r in resources}) > 1:
            raise EntraError(
                "invalid_scope",
                28000,
                "Provided value for the input parameter scope is not valid "
                "because it contains more than one resource.",
            )
        resource = resources.pop()
        if resource not in _RESOURCES:
            raise EntraError(
                "invalid_resource",
                500011,
                f"The resource principal named {resource} was not "
                f"found in the tenant named {self._seed.tenant_domain}.",
            )
        if default and names:
            raise EntraError(
                "invalid_scope",
                70011,
                "The provided value for the input parameter 'scope' is "
                "not valid: '/.default' cannot be combined with other scopes of the resource.",
            )
        if client_credentials and not default:
            raise EntraError(
                "invalid_scope",
                1002012,
                f"The provided value for scope {' '.join(raw)} is not "
                "valid. Client credential flows must have a scope value with /.default suffixed to "
                "the resource identifier (application ID URI).",
            )
        return Scope(
            _RESOURCES[resource], None if default else tuple(names), oidc, "offline_access" in raw
        )

    # --- client authentication ---

    def _authenticate_app(
        self, params: Mapping[str, str], app: SeedApp, ep: Endpoint, *, require: bool
    ) -> str:
        """Check the app's credential; returns appidacr ("1" secret, "2" assertion, "0" none)."""
        secret, assertion = params.get("client_secret"), params.get("client_assertion")
        if not app.is_confidential:
            if secret or assertion:
                raise EntraError(
                    "invalid_client",
                    700025,
                    "Client is public so neither 'client_assertion' nor "
                    "'client_secret' should be presented.",
                )
            if require:
                raise EntraError(
                    "invalid_client",
                    7000218,
                    "The request body must contain the following "
                    "parameter: 'client_assertion' or 'client_secret'.",
                )
            return "0"
        if secret and assertion:
            raise EntraError(
                "invalid_request",
                7000216,
                "Send either client_secret or client_assertion, not both.",
            )
        if secret:
            if not any(_same(secret, s) for s in app.client_secrets):
                raise EntraError(
                    "invalid_client",
                    7000215,
                    "Invalid client secret provided. Ensure the secret "
                    "being sent in the request is the client secret value, not the client secret "
                    f"ID, for a secret added to app '{app.app_id}'.",
                )
            return "1"
        if not assertion:
            raise EntraError(
                "invalid_client",
                7000218,
                "The request body must contain the following parameter: "
                "'client_assertion' or 'client_secret'.",
            )
        _check_assertion_type(params)
        claims = _unverified_claims(assertion)
        if claims.get("iss") == app.app_id:
            self._check_certificate_assertion(assertion, app, ep)
        else:
            self._check_federated_assertion(assertion, claims, app)
        return "2"

    def _check_certificate_assertion(self, assertion: str, app: SeedApp, ep: Endpoint) -> None:
        header = jwt.get_unverified_header(assertion)
        thumb = header.get("x5t#S256") or header.get("x5t")
        pem = self._certificates_by_thumbprint[app.app_id].get(thumb or "")
        if pem is None:
            raise EntraError(
                "invalid_client",
                700027,
                "Client assertion contains an invalid signature. [Reason "
                f"- The key was not found., Thumbprint of key used by client: '{thumb}', Please "
                "visit the Azure Portal, Graph Explorer or directly use MS Graph to see configured "
                f"keys for app Id '{app.app_id}'.]",
            )
        public_key = x509.load_pem_x509_certificate(pem.encode()).public_key()
        try:
            claims = jwt.decode(
                assertion,
                public_key,  # type: ignore[arg-type]
                algorithms=["RS256", "PS256"],
                options={
                    "verify_exp": False,
                    "verify_nbf": False,
                    "verify_aud": False,
                    "verify_iat": False,
                },
            )
        except jwt.PyJWTError:
            raise EntraError(
                "invalid_client",
                700027,
                "Client assertion failed signature validation. [Reason - "
                "The provided signature value did not match the expected signature value.]",
            ) from None
        if claims.get("sub") != app.app_id:
            raise EntraError(
                "invalid_client",
                700021,
                "Client assertion application identifier doesn't match "
                "'client_id' parameter: iss and sub must both be the client id.",
            )
        audiences = claims.get("aud")
        audiences = audiences if isinstance(audiences, list) else [audiences]
        if not any(a in (ep.token_endpoint, ep.token_endpoint + "/") for a in audiences):
            raise EntraError(
                "invalid_client",
                50013,
                f"Assertion audience claim does not match the required "
                f"value. The audience in the assertion was '{claims.get('aud')}' and the expected "
                f"audience is '{ep.token_endpoint}'.",
            )
        self._check_time_range(claims, "Client assertion")
        if not claims.get("jti"):
            raise EntraError(
                "invalid_client",
                50027,
                "JWT token is invalid or malformed: the client assertion has no jti claim.",
            )

    def _check_federated_assertion(
        self, assertion: str, claims: Mapping[str, Any], app: SeedApp
    ) -> None:
        issuer = claims.get("iss")
        candidates = [f for f in app.federated_credentials if f.issuer == issuer]
        if not candidates:
            raise EntraError(
                "invalid_client",
                700211,
                f"No matching federated identity record found for "
                f"presented assertion issuer '{issuer}'. Please check your federated identity "
                "credential Subject, Audience and Issuer against the presented assertion.",
            )
        jwks = next(i.jwks for i in self._seed.federation_issuers if i.issuer == issuer)
        try:
            key = jwt.PyJWKSet.from_dict(jwks)[jwt.get_unverified_header(assertion).get("kid", "")]
            jwt.decode(
                assertion,
                key,
                algorithms=["RS256", "ES256", "PS256"],
                options={
                    "verify_exp": False,
                    "verify_nbf": False,
                    "verify_aud": False,
                    "verify_iat": False,
                },
            )
        except (KeyError, jwt.PyJWTError):
            raise EntraError(
                "invalid_client",
                50013,
                "Assertion failed signature validation: it is not signed "
                f"by a key issuer '{issuer}' publishes.",
            ) from None
        self._check_time_range(claims, "Client assertion")
        subject = claims.get("sub")
        candidates = [f for f in candidates if f.subject == subject]
        if not candidates:
            raise EntraError(
                "invalid_client",
                700213,
                f"No matching federated identity record found for "
                f"presented assertion subject '{subject}'. Please check your federated identity "
                "credential Subject, Audience and Issuer against the presented assertion.",
            )
        audiences = claims.get("aud")
        audiences = set(audiences if isinstance(audiences, list) else [audiences])
        if not any(audiences & set(f.audiences) for f in candidates):
            raise EntraError(
                "invalid_client",
                700212,
                f"No matching federated identity record found for "
                f"presented assertion audience '{claims.get('aud')}'. Please check your federated "
                "identity credential Subject, Audience and Issuer against the presented assertion.",
            )

    def _authenticate_identity(
        self, params: Mapping[str, str], identity: AgentIdentity, ep: Endpoint
    ) -> None:
        """An agent identity holds no credential: its only client assertion is T1 from its blueprint."""
        if params.get("client_secret"):
            raise EntraError(
                "invalid_client",
                7000215,
                "Invalid client secret provided: agent identity "
                f"'{identity.id}' has no secrets; authenticate with a token (T1) from its blueprint.",
            )
        assertion = params.get("client_assertion")
        if not assertion:
            raise EntraError(
                "invalid_client",
                7000218,
                "The request body must contain the following parameter: "
                "'client_assertion' (the agent identity blueprint's token for this agent identity).",
            )
        _check_assertion_type(params)
        unverified = _unverified_claims(assertion)
        if unverified.get("iss") != ep.issuer:
            raise EntraError(
                "invalid_client",
                700211,
                f"No matching federated identity record found for "
                f"presented assertion issuer '{unverified.get('iss')}'. An agent identity accepts "
                f"only tokens its blueprint obtained from {ep.issuer}.",
            )
        claims = self._verified(assertion, "Assertion")
        if claims.get("aud") != TOKEN_EXCHANGE_AUDIENCE:
            raise EntraError(
                "invalid_client",
                700212,
                f"No matching federated identity record found for "
                f"presented assertion audience '{claims.get('aud')}'.",
            )
        self._check_time_range(claims, "Client assertion")
        if self._tokens.is_revoked(claims):
            raise EntraError(
                "invalid_grant",
                50173,
                "The provided grant has expired due to it being revoked: "
                "the client assertion was revoked.",
            )
        if claims.get("sub") != identity.id or claims.get("appid") != identity.blueprint_app_id:
            raise EntraError(
                "invalid_client",
                700213,
                f"No matching federated identity record found for "
                f"presented assertion subject '{claims.get('sub')}': this token was issued for "
                f"'{claims.get('sub')}' by app '{claims.get('appid')}', not for agent identity "
                f"'{identity.id}' by its blueprint '{identity.blueprint_app_id}'.",
            )

    def _check_instance_token(self, token: str, identity: AgentIdentity) -> None:
        """T2: the agent identity's own exchange token, presented as the user's federated credential."""
        claims = self._verified(token, "user_federated_identity_credential", error="invalid_grant")
        if claims.get("aud") != TOKEN_EXCHANGE_AUDIENCE:
            raise EntraError(
                "invalid_grant",
                50013,
                f"user_federated_identity_credential has audience "
                f"'{claims.get('aud')}'; it must be '{TOKEN_EXCHANGE_AUDIENCE}'.",
            )
        self._check_time_range(claims, "user_federated_identity_credential", error="invalid_grant")
        if self._tokens.is_revoked(claims):
            raise EntraError(
                "invalid_grant",
                50173,
                "The provided grant has expired due to it being revoked: "
                "the user_federated_identity_credential was revoked.",
            )
        if claims.get("appid") != identity.id or claims.get("sub") != identity.id:
            raise EntraError(
                "invalid_grant",
                50013,
                "user_federated_identity_credential was not issued to "
                f"agent identity '{identity.id}' (it belongs to '{claims.get('appid')}'); obtain it "
                "with client_credentials as the agent identity.",
            )

    def _verified(self, token: str, what: str, *, error: str = "invalid_client") -> dict[str, Any]:
        try:
            return self._tokens.decode(token)
        except InvalidToken as exc:
            raise EntraError(error, 50013, f"{what} failed signature validation: {exc}.") from None

    def _check_time_range(
        self, claims: Mapping[str, Any], what: str, *, error: str = "invalid_client"
    ) -> None:
        now = self._clock.now().timestamp()
        exp, nbf = claims.get("exp"), claims.get("nbf", claims.get("iat"))
        if (
            not isinstance(exp, (int, float))
            or exp <= now
            or (isinstance(nbf, (int, float)) and nbf > now)
        ):
            raise EntraError(
                error,
                700024,
                f"{what} is not within its valid time range. Current time: "
                f"{_stamp(now)}, assertion valid from {_stamp(nbf)}, expiry time of assertion "
                f"{_stamp(exp)}.",
            )

    # --- minting ---

    def _app_claims(
        self, ep: Endpoint, app_id: str, audience: str, roles: tuple[str, ...], *, acr: str
    ) -> dict[str, Any]:
        claims: dict[str, Any] = {
            "aud": audience,
            "iss": ep.issuer,
            "tid": self._seed.tenant_id,
            "appid": app_id,
            "azp": app_id,
            "appidacr": acr,
            "oid": app_id,
            "sub": app_id,
            "idtyp": "app",
            "ver": "2.0",
        }
        if audience == STORAGE_AUDIENCE:
            claims.update(iss=v1_issuer(self._seed.tenant_id), ver="1.0")
        if roles and audience != TOKEN_EXCHANGE_AUDIENCE:
            claims["roles"] = list(roles)
        return claims

    def _user_claims(
        self,
        ep: Endpoint,
        user: SeedUser,
        app_id: str,
        scope: Scope,
        consented: tuple[str, ...],
        *,
        display_name: str,
    ) -> dict[str, Any]:
        if scope.resource == TOKEN_EXCHANGE_AUDIENCE:
            raise EntraError(
                "invalid_scope",
                70011,
                f"'{TOKEN_EXCHANGE_AUDIENCE}' is only available to client_credentials requests.",
            )
        if scope.resource == STORAGE_AUDIENCE:
            granted: tuple[str, ...] = ("user_impersonation",)
        elif scope.names is None:
            granted = consented
        else:
            missing = [n for n in scope.names if n not in consented]
            if missing:
                raise EntraError(
                    "invalid_grant",
                    65001,
                    f"The user or administrator has not consented to use the "
                    f"application with ID '{app_id}' named '{display_name}' for "
                    f"{', '.join(missing)}. Send an interactive authorization request for this user "
                    "and resource.",
                )
            granted = scope.names
        return {
            "aud": scope.resource,
            "iss": v1_issuer(self._seed.tenant_id)
            if scope.resource == STORAGE_AUDIENCE
            else ep.issuer,
            "tid": self._seed.tenant_id,
            "oid": user.id,
            "sub": b64url(hashlib.sha256(f"{user.id}/{app_id}".encode()).digest()[:24]),
            "upn": user.user_principal_name,
            "unique_name": user.user_principal_name,
            "name": user.display_name,
            "given_name": user.given_name,
            "family_name": user.surname,
            "idtyp": "user",
            "appid": app_id,
            "app_displayname": display_name,
            "scp": " ".join(granted),
            "ver": "1.0",
        }

    def signed_in_user_tokens(
        self, ep: Endpoint, user: SeedUser, app: SeedApp, scope: Scope
    ) -> dict[str, Any]:
        """What the token endpoint answers a public client's sign-in of ``user`` (no refresh token yet)."""
        claims = self._user_claims(
            ep, user, app.app_id, scope, app.delegated_scopes, display_name=app.display_name
        )
        return self._respond(
            claims, app_id=app.app_id, user=user, scope=scope, client_id=app.app_id, ep=ep
        )

    def _respond(
        self,
        claims: dict[str, Any],
        *,
        app_id: str,
        scope: Scope | None,
        user: SeedUser | None = None,
        client_id: str | None = None,
        ep: Endpoint | None = None,
    ) -> dict[str, Any]:
        token, lifetime = self._tokens.mint(
            claims, app_id=app_id, user_id=user.id if user else None
        )
        body: dict[str, Any] = {
            "token_type": "Bearer",
            "expires_in": lifetime,
            "ext_expires_in": lifetime,
            "access_token": token,
        }
        if scope is not None and user is not None:
            # Entra names Graph scopes bare and other resources' scopes with the resource prefix.
            prefix = "" if scope.resource == GRAPH_AUDIENCE else scope.resource + "/"
            body["scope"] = " ".join(prefix + s for s in claims["scp"].split())
            if scope.oidc and ep is not None and client_id is not None:
                id_token, _ = self._tokens.mint(
                    {
                        "aud": client_id,
                        "iss": ep.issuer,
                        "tid": self._seed.tenant_id,
                        "oid": user.id,
                        "sub": claims["sub"],
                        "preferred_username": user.user_principal_name,
                        "name": user.display_name,
                        "ver": "2.0",
                    },
                    app_id=client_id,
                    user_id=user.id,
                )
                body["id_token"] = id_token
                body["client_info"] = b64url(
                    json.dumps({"uid": user.id, "utid": self._seed.tenant_id}).encode()
                )
        return body


# --- small pure helpers ---


def _same(given: str, expected: str) -> bool:
    """Constant-time comparison of secrets (as bytes: compare_digest refuses non-ASCII str)."""
    return hmac.compare_digest(given.encode(), expected.encode())


def _check_assertion_type(params: Mapping[str, str]) -> None:
    kind = required_param(params, "client_assertion_type")
    if kind != JWT_BEARER:
        raise EntraError(
            "invalid_request",
            70002,
            f"Error validating credentials: client_assertion_type "
            f"'{kind}' is not supported; use '{JWT_BEARER}'.",
        )


def _unverified_claims(assertion: str) -> dict[str, Any]:
    try:
        return jwt.decode(assertion, options={"verify_signature": False})
    except jwt.PyJWTError:
        raise EntraError("invalid_client", 50027, "JWT token is invalid or malformed.") from None


def certificate_thumbprints(pem: str) -> tuple[str, str]:
    """The x5t#S256 and x5t header values a certificate's assertions carry."""
    der = x509.load_pem_x509_certificate(pem.encode()).public_bytes(serialization.Encoding.DER)
    return b64url(hashlib.sha256(der).digest()), b64url(hashlib.sha1(der).digest())  # noqa: S324


def _stamp(epoch: object) -> str:
    if not isinstance(epoch, (int, float)):
        return "(absent)"
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%m/%d/%Y %H:%M:%S")

"""The MCP server from the replica's settings, and the start-up check of its auth settings.

``check_auth_config`` refuses settings that are half set, or that would open /mcp without
authentication on an address other than loopback; its messages name the ``ENTRABOT_*`` variables to
set. The Entra issuer and signing keys are the tenant's v2.0 endpoints under the authority.
"""

from __future__ import annotations

import ipaddress

import httpx

from service.config import Settings
from service.delivery.host_keeper import HostKeeper
from service.delivery.hub import DeliveryHub
from service.delivery.inbox import Inbox
from service.mcp.access_policy import AccessPolicy
from service.mcp.host_identity import HostNames, HostNamesError, parse_host_names
from service.mcp.hosts import parse_push_hosts
from service.mcp.instructions import HostInstructions
from service.mcp.options import McpAuthOptions, McpOptions
from service.mcp.push_target import PushDelivery
from service.mcp.server import McpService
from service.mcp.tool_registry import ToolRegistry
from service.telemetry.metrics import Metrics


class AuthConfigError(RuntimeError):
    """The auth settings are incomplete or unsafe; the message says what to set."""


def build_mcp(
    settings: Settings,
    hub: DeliveryHub,
    *,
    metrics: Metrics,
    tools: ToolRegistry | None = None,
    http_client: httpx.AsyncClient | None = None,
    instructions: HostInstructions | None = None,
    keeper: HostKeeper | None = None,
    inbox: Inbox | None = None,
) -> McpService:
    """The MCP server for one app instance. Raises ``AuthConfigError`` for half-set or unsafe auth
    settings."""
    return McpService(
        mcp_options(settings),
        PushDelivery(hub, metrics.delivery, keeper=keeper),
        metrics=metrics.mcp,
        tools=tools,
        http_client=http_client,
        instructions=instructions,
        inbox=inbox,
    )


def mcp_options(settings: Settings) -> McpOptions:
    """What the MCP server reads of ``settings``, once they pass ``check_auth_config``."""
    check_auth_config(settings)
    return McpOptions(
        auth=McpAuthOptions(
            static_tokens=_static_tokens(settings),
            jwt_audiences=_jwt_audiences(settings),
            issuer=entra_issuer(settings),
            jwks_url=entra_jwks_url(settings),
            policy=_access_policy(settings),
            public_base_url=settings.mcp_public_base_url,
        ),
        allowed_hosts=_comma_list(settings.mcp_allowed_hosts),
        allowed_origins=_comma_list(settings.mcp_allowed_origins),
        push_hosts=parse_push_hosts(settings.push_hosts),
        session_idle_timeout_s=settings.mcp_session_idle_timeout_s,
        host_names=host_names(settings),
    )


def host_names(settings: Settings) -> HostNames:
    try:
        return parse_host_names(
            settings.mcp_token_hosts,
            settings.mcp_principal_hosts,
            static_count=len(_static_tokens(settings)),
        )
    except HostNamesError as exc:
        raise AuthConfigError(str(exc)) from None


def entra_issuer(settings: Settings) -> str:
    return f"{settings.authority.rstrip('/')}/{settings.tenant_id}/v2.0"


def entra_jwks_url(settings: Settings) -> str:
    return f"{settings.authority.rstrip('/')}/{settings.tenant_id}/discovery/v2.0/keys"


def check_auth_config(settings: Settings) -> None:
    """Refuse to start with auth settings that are half set, or with an open /mcp off loopback."""
    policy = _access_policy(settings)
    if _jwt_audiences(settings) and not settings.tenant_id:
        raise AuthConfigError(
            "ENTRABOT_MCP_JWT_AUDIENCE is set but ENTRABOT_TENANT_ID is not; set the tenant whose "
            "tokens /mcp accepts, or unset ENTRABOT_MCP_JWT_AUDIENCE"
        )
    if _jwt_audiences(settings) and not policy.grants_anything:
        # Without it any app in the tenant could get a token for this audience and read the agent's mail.
        raise AuthConfigError(
            "ENTRABOT_MCP_JWT_AUDIENCE is set but neither ENTRABOT_MCP_JWT_REQUIRED_ROLES nor "
            "ENTRABOT_MCP_JWT_REQUIRED_SCOPES is; set the app role (or delegated scope) a client must hold "
            "(docs/entra-app-registration.md)"
        )
    if (policy.grants_anything or policy.client_ids) and not _jwt_audiences(settings):
        raise AuthConfigError(
            "ENTRABOT_MCP_JWT_REQUIRED_ROLES, _REQUIRED_SCOPES or _ALLOWED_CLIENT_IDS is set but "
            "ENTRABOT_MCP_JWT_AUDIENCE is not; set the audience of the tokens /mcp accepts, or unset them"
        )
    if settings.mcp_static_tokens is not None and not _static_tokens(settings):
        raise AuthConfigError(
            "ENTRABOT_MCP_STATIC_TOKENS is set but holds no token; give one or more comma-separated "
            "tokens, or unset it"
        )
    host_names(settings)
    if not auth_configured(settings) and not _is_loopback(settings.host):
        raise AuthConfigError(
            f"ENTRABOT_HOST is {settings.host!r}, which is not a loopback address, and /mcp has no "
            "authentication; set ENTRABOT_MCP_JWT_AUDIENCE (with ENTRABOT_TENANT_ID) or "
            "ENTRABOT_MCP_STATIC_TOKENS, or bind ENTRABOT_HOST=127.0.0.1"
        )


def auth_configured(settings: Settings) -> bool:
    return bool(_static_tokens(settings) or _jwt_audiences(settings))


def _static_tokens(settings: Settings) -> tuple[str, ...]:
    if settings.mcp_static_tokens is None:
        return ()
    return _comma_list(settings.mcp_static_tokens.get_secret_value())


def _jwt_audiences(settings: Settings) -> tuple[str, ...]:
    return _comma_list(settings.mcp_jwt_audience)


def _access_policy(settings: Settings) -> AccessPolicy:
    return AccessPolicy.from_settings(
        settings.mcp_jwt_required_roles,
        settings.mcp_jwt_required_scopes,
        settings.mcp_jwt_allowed_client_ids,
    )


def _is_loopback(host: str) -> bool:
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def _comma_list(value: str | None) -> tuple[str, ...]:
    return tuple(part.strip() for part in (value or "").split(",") if part.strip())

"""What the MCP server reads of the replica's settings, built from them in
``service.from_settings.mcp`` (which also refuses settings that are half set or unsafe).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from service.mcp.access_policy import AccessPolicy
from service.mcp.host_identity import HostNames


@dataclass(frozen=True, slots=True)
class McpAuthOptions:
    """Who may use /mcp: static tokens for local runs, Entra-issued JWTs in a tenant; neither is
    anonymous access (loopback only)."""

    static_tokens: tuple[str, ...] = field(default=(), repr=False)  # secrets: never in a repr
    jwt_audiences: tuple[str, ...] = ()
    # The tenant's token issuer and signing keys; read only when ``jwt_audiences`` is set.
    issuer: str = ""
    jwks_url: str = ""
    policy: AccessPolicy = AccessPolicy(frozenset(), frozenset())
    # Where hosts reach this service, for the resource metadata; else each request's scheme and Host.
    public_base_url: str | None = None

    @property
    def configured(self) -> bool:
        return bool(self.static_tokens or self.jwt_audiences)


@dataclass(frozen=True, slots=True)
class McpOptions:
    auth: McpAuthOptions
    allowed_hosts: tuple[str, ...]  # Host headers /mcp answers (transport_security)
    allowed_origins: tuple[str, ...]
    push_hosts: tuple[str, ...]  # clientInfo names that take channel pushes (hosts)
    session_idle_timeout_s: float
    host_names: HostNames = HostNames()  # which host a credential speaks for (host_identity)

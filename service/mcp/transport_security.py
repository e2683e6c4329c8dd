"""DNS-rebinding protection for /mcp: the Host and Origin headers a request may carry.

The SDK's check (421 for a Host, 403 for an Origin not allowed) runs inside its transport, after
the session lookup, so an unknown session would answer 404 first and every request would reach
auth before it. ``HostOriginGuard`` runs the same check in front of everything; the manager keeps
its own copy as well.
"""

from __future__ import annotations

from collections.abc import Sequence

from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send


def transport_security_settings(
    allowed_hosts: Sequence[str], allowed_origins: Sequence[str]
) -> TransportSecuritySettings:
    """Allowed hosts and origins (``ENTRABOT_MCP_ALLOWED_HOSTS`` / ``ENTRABOT_MCP_ALLOWED_ORIGINS``).

    A host given without a port is allowed on any port (a Host header carries the port); origins
    are taken as written, where ``http://localhost:*`` allows any port.
    """
    hosts: list[str] = []
    for entry in allowed_hosts:
        hosts.extend(_host_patterns(entry))
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=list(dict.fromkeys(hosts)),
        allowed_origins=list(dict.fromkeys(allowed_origins)),
    )


class HostOriginGuard:
    """Answers 421 (Host) or 403 (Origin) before auth, session lookup or the SDK see the request."""

    def __init__(self, app: ASGIApp, security: TransportSecuritySettings) -> None:
        self.app = app
        self._check = TransportSecurityMiddleware(security)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            # is_post=False: the content-type rule for POSTs stays with the SDK, which owns that answer.
            refusal = await self._check.validate_request(Request(scope), is_post=False)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _host_patterns(entry: str) -> list[str]:
    if entry.startswith("["):  # [::1] or [::1]:8080
        return [entry] if "]:" in entry else [entry, f"{entry}:*"]
    if entry.count(":") > 1:  # a bare IPv6 address
        return [f"[{entry}]", f"[{entry}]:*"]
    if ":" in entry:  # host:port, or host:* already
        return [entry]
    return [entry, f"{entry}:*"]

"""Settings checked without Graph or storage: the /mcp auth settings and the notification URL."""

from __future__ import annotations

import httpx

from service.config import Settings
from service.doctor.report import Finding, fail, ok, skip
from service.from_settings.mcp import AuthConfigError, auth_configured, check_auth_config


def check_mcp_auth(settings: Settings) -> Finding:
    check = "mcp auth settings"
    try:
        check_auth_config(settings)
    except AuthConfigError as exc:
        return fail(check, str(exc))
    if settings.mcp_jwt_audience:
        return ok(
            check,
            f"Entra tokens for audience {settings.mcp_jwt_audience} (tenant {settings.tenant_id})",
        )
    if auth_configured(settings):
        return ok(check, "static bearer tokens (local runs only)")
    return ok(check, f"no authentication, bound to loopback {settings.host} (local runs only)")


async def check_notification_url(settings: Settings, http: httpx.AsyncClient) -> Finding:
    """Any HTTP answer proves the URL reachable; Graph's own validation handshake is the receiver's job."""
    check = "notification url"
    url = settings.notification_url
    if not url:
        return skip(check, "ENTRABOT_NOTIFICATION_URL is not set")
    parsed = httpx.URL(url)
    # Graph delivers change notifications to HTTPS endpoints only (Graph docs: "Set up notifications
    # for changes in resource data"); http is accepted for loopback test receivers.
    if parsed.scheme != "https" and parsed.host not in ("127.0.0.1", "localhost", "::1"):
        return fail(
            check,
            f"ENTRABOT_NOTIFICATION_URL={url} is not https; Graph only delivers to https URLs",
        )
    try:
        response = await http.get(url, timeout=10.0)
    except httpx.HTTPError as exc:
        return fail(
            check,
            f"{url} is unreachable ({type(exc).__name__}); check the URL, DNS and the ingress",
        )
    if response.status_code >= 500:
        return fail(check, f"{url} answered HTTP {response.status_code}; the receiver is failing")
    return ok(check, f"{url} answered HTTP {response.status_code}")

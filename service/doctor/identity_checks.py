"""The identity chain, hop by hop: settings, blueprint (T1), agent identity (T2), agent user (per scope).

One call to the real token provider walks all three hops; a ``TokenAcquisitionError`` names the hop
that failed, so the hops before it are proven and the ones after it are not tried.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx
import jwt

from service.config import Settings
from service.doctor.app_token import AgentIdentityAppToken
from service.doctor.report import Finding, fail, ok, skip
from service.from_settings.graph_auth import (
    blueprint_credential_from_settings,
    token_provider_from_settings,
)
from service.graph.auth import GRAPH_SCOPE, STORAGE_SCOPE, AccessToken, TokenProvider
from service.graph.errors import HOP_NAMES, TokenAcquisitionError, TokenConfigurationError
from service.telemetry.metrics import GraphMetrics


@dataclass(frozen=True)
class IdentityChain:
    """What the identity checks produced for the checks that follow (None where a hop failed)."""

    user_tokens: TokenProvider | None
    graph_token: AccessToken | None
    app_tokens: TokenProvider | None
    failed_hop: int | None = None  # the hop of the Graph token's chain that failed, if one did


def _hop_check(hop: int, resource: str = "") -> str:
    suffix = f", {resource}" if resource else ""
    return f"identity hop {hop} ({HOP_NAMES[hop]}{suffix})"


def hop_findings(
    error: TokenAcquisitionError | None, resource: str, *, hops: tuple[int, ...]
) -> list[Finding]:
    """ok for every hop before the failed one, FAIL for it, skip for the rest (all ok on success)."""
    findings: list[Finding] = []
    for hop in hops:
        check = _hop_check(hop, resource if hop == hops[-1] else "")
        if error is None or hop < error.hop:
            findings.append(ok(check, "token issued"))
        elif hop == error.hop:
            findings.append(fail(check, str(error)))
        else:
            findings.append(skip(check, f"not tried: hop {error.hop} failed"))
    return findings


async def check_identity(
    settings: Settings, http: httpx.AsyncClient, *, storage_by_agent_user: bool
) -> tuple[list[Finding], IdentityChain]:
    try:
        provider = token_provider_from_settings(settings, http, metrics=GraphMetrics())
        credential = blueprint_credential_from_settings(settings)
    except TokenConfigurationError as exc:
        return [fail("identity settings", str(exc))], IdentityChain(None, None, None)
    findings = [ok("identity settings", provider.describe())]
    graph_token: AccessToken | None = None
    failed_hop: int | None = None
    try:
        graph_token = await provider.get_token(GRAPH_SCOPE)
        findings += hop_findings(None, "Graph", hops=(1, 2, 3))
    except TokenAcquisitionError as exc:
        failed_hop = exc.hop
        findings += hop_findings(exc, "Graph", hops=(1, 2, 3))
    if storage_by_agent_user:
        findings.append(await _storage_token(provider, graph_token is not None))
    app_tokens = AgentIdentityAppToken(
        settings.authority,
        settings.tenant_id or "",
        settings.blueprint_client_id or "",
        credential,
        settings.agent_identity_id or "",
        http=http,
    )
    chain = IdentityChain(
        provider if graph_token is not None else None, graph_token, app_tokens, failed_hop
    )
    return findings, chain


async def _storage_token(provider: TokenProvider, chain_works: bool) -> Finding:
    check = _hop_check(3, "Azure Storage")
    if not chain_works:
        return skip(check, "not tried: the Graph token failed first")
    try:
        await provider.get_token(STORAGE_SCOPE)
    except TokenAcquisitionError as exc:
        return fail(
            check,
            f"{exc}; the agent user needs the storage role on the container (see docs/azure.md)",
        )
    return ok(check, "token issued")


def granted_scopes(token: AccessToken) -> frozenset[str]:
    """The delegated scopes a Graph token carries. Read, not verified: Graph verifies it, we only look."""
    try:
        claims = jwt.decode(token.token, options={"verify_signature": False})
    except jwt.PyJWTError:
        return frozenset()
    return frozenset(str(claims.get("scp", "")).split())

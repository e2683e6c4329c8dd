"""Delegated mode's parts from Settings, or exactly which ENTRABOT_* variable is missing or clashes."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

import httpx

from service.config import Settings
from service.graph.errors import TokenConfigurationError
from service.graph.http_pool import new_http_client
from service.signin.command import sign_in
from service.signin.flow import SignInFlow
from service.signin.provider import DelegatedTokenProvider, refresh_lease
from service.signin.public_client import PublicClient
from service.signin.sealing import KEY_ADVICE, SealingKey, decode_key
from service.signin.store import SignInStore
from service.storage.backend import MemoryBackend
from service.telemetry.metrics import GraphMetrics, Metrics

KEY_SETTING = "ENTRABOT_DELEGATED_TOKEN_KEY"
_REQUIRED = {
    "tenant_id": "the Entra tenant id",
    "delegated_client_id": "the application (client) id of the public client app registration people sign in to",
    "delegated_token_key": f"the key that seals the sign-in in the container ({KEY_ADVICE})",
}


def check_delegated_settings(settings: Settings) -> None:
    """TokenConfigurationError naming every delegated-mode setting that is missing or cannot work."""
    missing = [
        f"ENTRABOT_{field.upper()} ({what})"
        for field, what in _REQUIRED.items()
        if not getattr(settings, field)
    ]
    if missing:
        raise TokenConfigurationError(
            "delegated mode needs " + ", ".join(missing) + "; set them in the "
            "environment or .env (docs/configuration.md, delegated mode)"
        )
    if settings.blob_auth == "agent_user":
        raise TokenConfigurationError(
            "ENTRABOT_AUTH_MODE=delegated with ENTRABOT_BLOB_AUTH=agent_user: there is no agent user, and the "
            "signed-in person's token is itself kept in the container; set ENTRABOT_BLOB_AUTH=default_credential "
            "(AKS workload identity) or connection_string"
        )
    assert settings.delegated_token_key is not None
    try:
        decode_key(settings.delegated_token_key.get_secret_value())
    except ValueError as exc:  # it says what the key must be, never the value
        raise TokenConfigurationError(f"{KEY_SETTING} {exc}") from None


def check_sign_in_settings(settings: Settings) -> None:
    """TokenConfigurationError (the CLI's exit 2) when the settings cannot sign anyone in."""
    if settings.auth_mode != "delegated":
        raise TokenConfigurationError(
            f"ENTRABOT_AUTH_MODE={settings.auth_mode}: signin is for delegated mode, where the fleet acts as a "
            "signed-in person; set ENTRABOT_AUTH_MODE=delegated (and the settings docs/configuration.md lists "
            "for it), or use the agent-user identity without signing in"
        )
    check_delegated_settings(settings)


def sealing_key(settings: Settings) -> SealingKey:
    check_delegated_settings(settings)
    assert settings.delegated_token_key is not None
    return SealingKey.from_setting(settings.delegated_token_key.get_secret_value())


def sign_in_store(settings: Settings, backend: MemoryBackend) -> SignInStore:
    return SignInStore(backend, sealing_key(settings))


def public_client(
    settings: Settings,
    http: httpx.AsyncClient,
    *,
    metrics: GraphMetrics,
    clock: Callable[[], float] = time.time,
) -> PublicClient:
    """``clock``: the wall clock a token's lifetime is counted on (a test moves it)."""
    check_delegated_settings(settings)
    return PublicClient(
        http,
        settings.authority,
        settings.tenant_id or "",
        settings.delegated_client_id or "",
        clock=clock,
        metrics=metrics,
    )


def sign_in_flow(
    settings: Settings, backend: MemoryBackend, http: httpx.AsyncClient, *, metrics: GraphMetrics
) -> SignInFlow:
    return SignInFlow(
        public_client(settings, http, metrics=metrics),
        sign_in_store(settings, backend),
        http,
        settings.graph_url,
        settings.tenant_id or "",
    )


async def sign_in_with_settings(
    settings: Settings,
    backend: MemoryBackend,
    *,
    replace: bool,
    timeout_s: float,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
) -> None:
    """``entrabot-fleet signin``: the flow the settings name, walked by ``service.signin.command``."""
    async with new_http_client(read_timeout_s=settings.graph_timeout_s) as http:
        # The command's token requests are its own: nobody scrapes a one-off CLI run.
        flow = sign_in_flow(settings, backend, http, metrics=GraphMetrics())
        await sign_in(flow, backend, replace=replace, timeout_s=timeout_s, out=out, err=err)


def delegated_token_provider(
    settings: Settings,
    backend: MemoryBackend,
    http: httpx.AsyncClient,
    *,
    replica_id: str,
    metrics: Metrics,
) -> DelegatedTokenProvider:
    """The replica's tokens in delegated mode: the shared sign-in record, refreshed by one lease holder."""
    return DelegatedTokenProvider(
        sign_in_store(settings, backend),
        public_client(settings, http, metrics=metrics.graph),
        refresh_lease(backend, replica_id, metrics=metrics.roles),
        replica_id=replica_id,
        tenant_id=settings.tenant_id or "",
    )

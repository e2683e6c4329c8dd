"""Delegated mode's parts from Settings, or exactly which ENTRABOT_* variable is missing or clashes."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx

from service.config import Settings
from service.graph.errors import TokenConfigurationError
from service.signin.provider import DelegatedTokenProvider, refresh_lease
from service.signin.public_client import PublicClient
from service.signin.sealing import KEY_ADVICE, SealingKey
from service.signin.store import SignInStore
from service.storage.backend import MemoryBackend
from service.telemetry.metrics import Metrics, RoleMetrics

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
    metrics: Metrics | None = None,
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


def delegated_token_provider(
    settings: Settings,
    backend: MemoryBackend,
    http: httpx.AsyncClient,
    *,
    replica_id: str,
    metrics: Metrics | None = None,
) -> DelegatedTokenProvider:
    """The replica's tokens in delegated mode: the shared sign-in record, refreshed by one lease holder."""
    return DelegatedTokenProvider(
        sign_in_store(settings, backend),
        public_client(settings, http, metrics=metrics),
        refresh_lease(
            backend, replica_id, metrics=metrics.roles if metrics is not None else RoleMetrics()
        ),
        replica_id=replica_id,
        tenant_id=settings.tenant_id or "",
    )

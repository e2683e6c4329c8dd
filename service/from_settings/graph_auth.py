"""Build the agent-user token provider from Settings, or say exactly which ENTRABOT_* variable is wrong."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import httpx

from service.config import Settings
from service.graph.auth.agent_user import AgentUserIdentity, AgentUserTokenProvider
from service.graph.auth.credentials import (
    BlueprintCertificate,
    BlueprintCredential,
    BlueprintFederatedTokenFile,
    BlueprintSecret,
)
from service.graph.errors import TokenConfigurationError
from service.telemetry.metrics import GraphMetrics

log = logging.getLogger(__name__)

_REQUIRED = {
    "tenant_id": "the Entra tenant id",
    "blueprint_client_id": "the agent identity blueprint's application (client) id",
    "agent_identity_id": "the agent identity's id",
    "agent_user_id": "the agent user's object id",
}
_CREDENTIALS = (
    "blueprint_federated_token_file",
    "blueprint_certificate_path",
    "blueprint_client_secret",
)


def env_name(field: str) -> str:
    return f"ENTRABOT_{field.upper()}"


def token_provider_from_settings(
    settings: Settings,
    http: httpx.AsyncClient,
    *,
    metrics: GraphMetrics,
    clock: Callable[[], float] = time.time,
) -> AgentUserTokenProvider:
    """The three-hop agent-user provider; TokenConfigurationError names every missing or clashing setting."""
    if settings.auth_mode != "agent_user":
        raise TokenConfigurationError(
            f"{env_name('auth_mode')}={settings.auth_mode}: agent-user tokens are for agent_user mode; delegated "
            "mode acts with the signed-in person's tokens (service.from_settings.signin.delegated_token_provider)"
        )
    missing = [
        f"{env_name(f)} ({what})" for f, what in _REQUIRED.items() if not getattr(settings, f)
    ]
    if missing:
        raise TokenConfigurationError(
            "agent-user mode needs " + ", ".join(missing) + "; set them in the environment or .env"
        )
    identity = AgentUserIdentity(
        settings.authority,
        settings.tenant_id or "",
        settings.blueprint_client_id or "",
        settings.agent_identity_id or "",
        settings.agent_user_id or "",
    )
    provider = AgentUserTokenProvider(
        identity,
        blueprint_credential_from_settings(settings),
        http=http,
        metrics=metrics,
        clock=clock,
    )
    log.info("agent-user tokens: %s", provider.describe())
    return provider


def blueprint_credential_from_settings(settings: Settings) -> BlueprintCredential:
    chosen = [f for f in _CREDENTIALS if getattr(settings, f)]
    if not chosen:
        raise TokenConfigurationError(
            "no blueprint credential: set one of "
            + ", ".join(env_name(f) for f in _CREDENTIALS)
            + " (in AKS, the workload-identity token file: ENTRABOT_BLUEPRINT_FEDERATED_TOKEN_FILE="
            "$AZURE_FEDERATED_TOKEN_FILE)"
        )
    if len(chosen) > 1:
        raise TokenConfigurationError(
            " and ".join(env_name(f) for f in chosen)
            + " are set together; set exactly one blueprint credential"
        )
    if settings.blueprint_certificate_key_path and not settings.blueprint_certificate_path:
        raise TokenConfigurationError(
            f"{env_name('blueprint_certificate_key_path')} is set but {env_name('blueprint_certificate_path')} "
            "is not; set both, or neither"
        )
    if settings.blueprint_federated_token_file:
        path = settings.blueprint_federated_token_file
        if not path.is_file():
            raise TokenConfigurationError(
                f"{env_name('blueprint_federated_token_file')}={path} does not exist; in AKS it is the "
                "projected service-account token (check the pod's azure.workload.identity/use label)"
            )
        return BlueprintFederatedTokenFile(path)
    if settings.blueprint_certificate_path:
        try:
            return BlueprintCertificate(
                settings.blueprint_certificate_path, settings.blueprint_certificate_key_path
            )
        except (OSError, ValueError) as exc:
            raise TokenConfigurationError(
                f"{env_name('blueprint_certificate_path')}: cannot load the blueprint certificate "
                f"({exc}); it must be a PEM certificate, with its RSA private key in the same file or in "
                f"{env_name('blueprint_certificate_key_path')}"
            ) from None
    secret = settings.blueprint_client_secret
    if secret is None or not secret.get_secret_value().strip():
        raise TokenConfigurationError(
            f"{env_name('blueprint_client_secret')} is empty; set a secret or unset it"
        )
    return BlueprintSecret(secret)

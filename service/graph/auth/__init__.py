"""Tokens for Graph and Blob: the three-hop agent-user provider, its credentials, and adapters."""

from service.graph.auth.agent_user import AgentUserIdentity, AgentUserTokenProvider
from service.graph.auth.credentials import (
    BlueprintCertificate,
    BlueprintCredential,
    BlueprintFederatedTokenFile,
    BlueprintSecret,
)
from service.graph.auth.tokens import (
    GRAPH_SCOPE,
    STORAGE_SCOPE,
    AccessToken,
    StaticTokenProvider,
    TokenProvider,
    storage_token_provider,
)

__all__ = [
    "GRAPH_SCOPE",
    "STORAGE_SCOPE",
    "AccessToken",
    "AgentUserIdentity",
    "AgentUserTokenProvider",
    "BlueprintCertificate",
    "BlueprintCredential",
    "BlueprintFederatedTokenFile",
    "BlueprintSecret",
    "StaticTokenProvider",
    "TokenProvider",
    "storage_token_provider",
]

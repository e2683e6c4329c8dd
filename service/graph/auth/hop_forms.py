"""The token-endpoint forms of the agent user's three hops, as Entra Agent ID's flow wants them.

One place for the field names, shared by the fleet's cached provider (``agent_user.py``) and the
doctor's uncached one (``service/doctor/app_token.py``), so the preflight asks Entra exactly what the
fleet asks. The names are those MSAL sends for these grants (``fmi_path``; ``user_id`` and
``user_federated_identity_credential``, from msal.oauth2cli's ``obtain_token_by_user_fic``).
"""

from __future__ import annotations

from collections.abc import Mapping

from service.graph.auth.credentials import JWT_BEARER

EXCHANGE_SCOPE = "api://AzureADTokenExchange/.default"


def blueprint_form(
    blueprint_client_id: str, agent_identity_id: str, credential_fields: Mapping[str, str]
) -> dict[str, str]:
    """Hop 1: the blueprint, with its own credential, asks for T1 on behalf of the agent identity."""
    return {
        "grant_type": "client_credentials",
        "client_id": blueprint_client_id,
        "scope": EXCHANGE_SCOPE,
        "fmi_path": agent_identity_id,
        **credential_fields,
    }


def agent_identity_form(agent_identity_id: str, scope: str, t1: str) -> dict[str, str]:
    """Hop 2: the agent identity, with T1 as its assertion: T2 (exchange scope) or an app-only token."""
    return {
        "grant_type": "client_credentials",
        "client_id": agent_identity_id,
        "scope": scope,
        "client_assertion_type": JWT_BEARER,
        "client_assertion": t1,
    }


def user_fic_form(
    agent_identity_id: str, agent_user_id: str, scope: str, t1: str, t2: str
) -> dict[str, str]:
    """Hop 3: ``user_fic``: T1 as the client assertion, T2 as the agent user's federated credential."""
    return {
        "grant_type": "user_fic",
        "client_id": agent_identity_id,
        "scope": scope,
        "client_assertion_type": JWT_BEARER,
        "client_assertion": t1,
        "user_id": agent_user_id,
        "user_federated_identity_credential": t2,
    }

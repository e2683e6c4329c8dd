"""The ENTRABOT_* settings that point a replica at a running Graph emulator: as its agent user, or in
delegated mode as a person signed in through its public client app.

Shared by the local demo, the fleet harness, the benchmarks and the tests, so they all configure a
replica exactly as an operator would: through the environment.
"""

from __future__ import annotations

from emulator.seed import Seed


def agent_user_env(seed: Seed, *, base_url: str) -> dict[str, str]:
    """Settings for the seed's agent user, authenticating with the blueprint's first client secret."""
    blueprint = seed.blueprint
    if not blueprint.client_secrets:
        raise ValueError(
            "the seed's blueprint has no client secret; the local stack signs in with one"
        )
    return {
        "ENTRABOT_AUTH_MODE": "agent_user",
        "ENTRABOT_GRAPH_URL": f"{base_url}/v1.0",
        "ENTRABOT_AUTHORITY": base_url,
        "ENTRABOT_TENANT_ID": seed.tenant_id,
        "ENTRABOT_BLUEPRINT_CLIENT_ID": blueprint.app_id,
        "ENTRABOT_BLUEPRINT_CLIENT_SECRET": blueprint.client_secrets[0],
        "ENTRABOT_AGENT_IDENTITY_ID": seed.agent_identity.id,
        "ENTRABOT_AGENT_USER_ID": seed.agent_user.id,
        "ENTRABOT_AGENT_USER_UPN": seed.agent_user.user_principal_name,
    }


def delegated_env(seed: Seed, *, base_url: str, token_key: str) -> dict[str, str]:
    """Settings for delegated mode against the seed's public client app: a person signs in with
    `entrabot-fleet signin`, and ``token_key`` (32 bytes, base64) seals their tokens in the container."""
    return {
        "ENTRABOT_AUTH_MODE": "delegated",
        "ENTRABOT_GRAPH_URL": f"{base_url}/v1.0",
        "ENTRABOT_AUTHORITY": base_url,
        "ENTRABOT_TENANT_ID": seed.tenant_id,
        "ENTRABOT_DELEGATED_CLIENT_ID": seed.public_client.app_id,
        "ENTRABOT_DELEGATED_TOKEN_KEY": token_key,
    }

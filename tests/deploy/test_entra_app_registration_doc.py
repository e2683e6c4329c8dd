"""docs/entra-app-registration.md says what service/mcp/verifiers.py, access_policy.py and
service/from_settings/mcp.py do: the v2.0 issuer
only (v1.0 tokens refused), the client named by `azp`, the keys from the tenant's v2.0 key set."""

from __future__ import annotations

import re

from service.config import Settings
from service.from_settings.mcp import entra_issuer, entra_jwks_url
from service.mcp.access_policy import token_client_id
from tests.deploy.deploy_facts import REPO_ROOT

DOC = REPO_ROOT / "docs" / "entra-app-registration.md"
TENANT = "<tenant>"  # the doc's placeholder


def sentences() -> list[str]:
    return [" ".join(s.split()) for s in re.split(r"(?<=[.:])\s+(?=[A-Z(`*])", DOC.read_text())]


def test_the_doc_names_the_issuer_and_key_set_the_service_trusts() -> None:
    settings = Settings(_env_file=None, tenant_id=TENANT)
    text = DOC.read_text()
    assert f"`{entra_issuer(settings)}`" in text and f"`{entra_jwks_url(settings)}`" in text


def test_v1_tokens_are_only_ever_described_as_refused() -> None:
    about_v1 = [s for s in sentences() if "v1.0" in s]
    assert about_v1, "the doc says what happens to v1.0 tokens"
    assert [s for s in about_v1 if "refused" not in s] == []


def test_the_client_claim_the_doc_names_is_the_one_the_policy_reads_in_accepted_tokens() -> None:
    # A v2.0 token names its client in azp; the doc's allow-list section must say so.
    assert token_client_id({"azp": "client-app", "ver": "2.0"}) == "client-app"
    [allow_list] = [s for s in sentences() if "ENTRABOT_MCP_JWT_ALLOWED_CLIENT_IDS=" in s]
    assert "`azp`" in allow_list and "appid" not in allow_list

""".env.example: what `make serve` reads after `cp .env.example .env` — the emulator's demo tenant,
and only settings the service knows."""

from __future__ import annotations

from dotenv import dotenv_values

from emulator.seed import demo_seed_path, load_seed
from service.config import Settings
from service.devstack.emulator_env import agent_user_env
from service.from_settings.mcp import check_auth_config
from tests.deploy.deploy_facts import REPO_ROOT, unknown_settings

ENV_EXAMPLE = REPO_ROOT / ".env.example"
EMULATOR_URL = "http://127.0.0.1:8088"  # `entrabot-fleet emulator`'s default address


def example() -> dict[str, str]:
    values = dotenv_values(ENV_EXAMPLE)
    assert all(v is not None for v in values.values())
    return {k: v for k, v in values.items() if v is not None}


def test_env_example_names_the_emulator_demo_tenant_and_its_agent_user() -> None:
    expected = agent_user_env(load_seed(demo_seed_path()), base_url=EMULATOR_URL)
    assert {k: example()[k] for k in expected} == expected


def test_env_example_sets_only_known_settings_that_the_service_accepts() -> None:
    values = example()
    assert unknown_settings(values) == []
    settings = Settings(_env_file=ENV_EXAMPLE)
    check_auth_config(settings)  # /mcp on loopback with a token: serve starts
    assert settings.agent_user_id == values["ENTRABOT_AGENT_USER_ID"]

"""The chart in delegated mode: its two settings reach the pods (the key through a Secret), the values the
service would refuse at start-up are refused at install, and the notes say how to sign the fleet in."""

from __future__ import annotations

import base64
import shlex
from typing import Any

import helm_python
import pytest

from service.cli import build_parser
from service.signin.sealing import decode_key
from tests.deploy.chart_rendering import DELEGATED, FULLNAME, REQUIRED, merge, render
from tests.deploy.deploy_facts import assert_is_cli_command


def test_delegated_settings_reach_the_pods_and_the_key_only_through_the_secret() -> None:
    rendered = render(merge(REQUIRED, DELEGATED))
    config = rendered.data("ConfigMap", FULLNAME)
    assert config["ENTRABOT_AUTH_MODE"] == "delegated"
    assert config["ENTRABOT_DELEGATED_CLIENT_ID"] == DELEGATED["config"]["delegatedClientId"]
    assert "ENTRABOT_DELEGATED_TOKEN_KEY" not in config
    secret = rendered.data("Secret", FULLNAME)
    key = base64.b64decode(secret["ENTRABOT_DELEGATED_TOKEN_KEY"]).decode()
    assert key == DELEGATED["secrets"]["delegatedTokenKey"] and len(decode_key(key)) == 32


@pytest.mark.parametrize(
    "values, named",
    [
        ({"config": {"authMode": "delegated"}}, "config.delegatedClientId"),
        (
            {
                "config": {
                    "authMode": "delegated",
                    "delegatedClientId": DELEGATED["config"]["delegatedClientId"],
                }
            },
            "secrets.delegatedTokenKey",
        ),
        (merge(DELEGATED, {"config": {"blobAuth": "agent_user"}}), "config.blobAuth=agent_user"),
        (
            merge(DELEGATED, {"blueprint": {"clientId": "b1de9a14-0000-4f6f-8000-000000b1de9a"}}),
            "blueprint.clientId",
        ),
    ],
    ids=["no-client-id", "no-key", "agent-user-blob-auth", "agent-id-settings-too"],
)
def test_delegated_values_the_service_would_refuse_are_refused(
    values: dict[str, Any], named: str
) -> None:
    with pytest.raises(helm_python.HelmRenderError, match=named.replace(".", r"\.")):
        render(merge(REQUIRED, values))


def test_an_existing_secret_may_hold_the_key() -> None:
    rendered = render(
        merge(REQUIRED, {"config": DELEGATED["config"], "secrets": {"existingSecret": "entrabot"}})
    )
    assert rendered.env()["ENTRABOT_AUTH_MODE"] == "delegated" and rendered.all("Secret") == []


def test_the_notes_give_a_sign_in_command_with_the_fleets_settings() -> None:
    notes = render(merge(REQUIRED, DELEGATED)).notes
    assert "nobody has signed in" in notes
    command = next(line for line in notes.splitlines() if "kubectl" in line and "-signin" in line)
    assert '"args":["signin"]' in notes and '"configMapRef":{"name":"entrabot-fleet"}' in notes
    assert '"secretRef":{"name":"entrabot-fleet"}' in notes
    assert "run entrabot-fleet-signin --rm -it" in command
    assert_is_cli_command(build_parser(), shlex.split("signin"))
    assert "signin" not in render(REQUIRED).notes

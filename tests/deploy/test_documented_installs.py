"""The `helm install` commands the docs give render with the chart: an operator who copies one gets a
release the service starts with, not a refusal or a crash loop."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.chart_rendering import NAMESPACE, RELEASE, TENANT_ID, merge, render
from tests.deploy.deploy_facts import REPO_ROOT

DOCUMENTS = (REPO_ROOT / "deploy" / "README.md", REPO_ROOT / "docs" / "azure.md")
GUID = "6d2e8f10-0000-4a1b-8000-00000000d0c5"
# What `az deployment group show ... helmValues > values.azure.json` gives (deploy/bicep/main.bicep).
VALUES_AZURE_JSON = {
    "config": {
        "blobEndpoint": "https://entrabotabc.blob.core.windows.net/",
        "blobContainer": "entrabot",
        "tenantId": TENANT_ID,
    },
    "workloadIdentity": {"enabled": True, "clientId": "0b9c5e4f-7a7e-4d56-9c3a-5d0c8f1e2a3b"},
    "serviceAccount": {"name": "entrabot-fleet"},
}


def helm_installs(document: Path) -> list[list[str]]:
    """Each `helm install` command of a document's shell blocks, as arguments."""
    commands: list[list[str]] = []
    for block in re.findall(r"```bash\n(.*?)```", document.read_text(), flags=re.DOTALL):
        joined = re.sub(r"\\\n", " ", block)
        for line in joined.splitlines():
            line = line.split(" #", 1)[0].strip()
            if line.startswith("helm install "):
                # <a placeholder> and "$VARIABLE" are what the operator fills in.
                commands.append(shlex.split(re.sub(r"<[^>]*>", "FILLED_IN", line)))
    return commands


def filled_in(key: str, value: str) -> Any:
    if "FILLED_IN" not in value and "$" not in value:
        return value
    if key.endswith("Id"):
        return GUID
    if key.endswith("Upn"):
        return "entrabot@contoso.onmicrosoft.com"
    return re.sub(r"\$\w+|FILLED_IN", "filled-in", value)


def values_of(arguments: list[str]) -> dict[str, Any]:
    """The values a `helm install` command line passes: `-f values.azure.json` and each `--set a.b=c`."""
    layers: list[dict[str, Any]] = []
    for flag, argument in zip(arguments, arguments[1:], strict=False):
        if flag == "-f":
            assert argument == "values.azure.json", f"no stand-in for -f {argument}"
            layers.append(VALUES_AZURE_JSON)
        elif flag == "--set":
            key, _, value = argument.partition("=")
            node: Any = filled_in(key, value)
            node = {"true": True, "false": False}.get(node, node)
            for part in reversed(key.split(".")):
                node = {part: node}
            layers.append(node)
    return merge(*layers)


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_the_documented_helm_install_renders_a_release_the_service_starts_with(
    document: Path,
) -> None:
    [command] = helm_installs(document)
    assert command[:4] == ["helm", "install", RELEASE, "deploy/helm/entrabot-fleet"]
    assert command[command.index("-n") + 1] == NAMESPACE
    env = render(values_of(command)).env()
    assert (
        env["ENTRABOT_MCP_JWT_AUDIENCE"]
        and env["ENTRABOT_MCP_JWT_REQUIRED_ROLES"] == "Entrabot.Host"
    )

"""deploy/bicep: every file parses, every symbol and module wiring resolves (what a Bicep compiler
would check), and the resources carry the properties the fleet's security and cost depend on."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pycep import BicepParser

from service.ledger.fleet.hints import PREFIX as HINTS_PREFIX
from service.ledger.fleet.hints import segment_key
from tests.deploy.bicep_symbols import load_symbols
from tests.deploy.chart_rendering import MCP_AUTH, NAMESPACE, RELEASE, REQUIRED, merge, render
from tests.deploy.deploy_facts import BICEP_DIR

BICEP_FILES = sorted(BICEP_DIR.rglob("*.bicep"))
BLOB_DATA_CONTRIBUTOR = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"


@functools.cache
def parsed(path: Path) -> Mapping[str, Any]:  # read as plain JSON, not as pycep's TypedDicts
    return BicepParser().parse(file_path=path)


def resource(path: Path, symbol: str) -> dict[str, Any]:
    return parsed(path)["resources"][symbol]


def ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(BICEP_DIR)) for p in paths]


def test_bicep_files_exist() -> None:
    assert {
        "main.bicep",
        "modules/storage.bicep",
        "modules/identity.bicep",
        "modules/aks.bicep",
        "modules/monitoring.bicep",
    } <= set(ids(BICEP_FILES))


@pytest.mark.parametrize("path", BICEP_FILES, ids=ids(BICEP_FILES))
def test_every_bicep_file_parses(path: Path) -> None:
    assert "..." not in path.read_text(), (
        "the spread operator is not readable by the parsers used here"
    )
    document = parsed(path)
    assert document.get("resources") or document.get("modules")


@pytest.mark.parametrize("path", BICEP_FILES, ids=ids(BICEP_FILES))
def test_every_referenced_symbol_is_declared(path: Path) -> None:
    symbols = load_symbols(path)
    assert symbols.references, "the checker found no references at all"
    assert symbols.undefined() == []


def test_symbol_check_reports_undeclared_names(tmp_path: Path) -> None:
    broken = tmp_path / "broken.bicep"
    broken.write_text(
        "param names array\n"
        "var upper = [for (name, i) in names: '${toUpper(name)}-${i}-${suffix}']\n"
        "resource account 'Microsoft.Storage/storageAccounts@2023-05-01' = {\n"
        "  name: 'x'\n  location: loc\n  properties: { a: account.properties.b[idx], c: upper }\n}\n"
        "output id string = id\n"
    )
    undefined = load_symbols(broken).undefined()
    assert [u.split("'")[1] for u in undefined] == ["suffix", "loc", "idx", "id"]


@pytest.mark.parametrize("path", BICEP_FILES, ids=ids(BICEP_FILES))
def test_modules_get_the_parameters_they_declare_and_give_the_outputs_read(path: Path) -> None:
    symbols = load_symbols(path)
    for use in symbols.module_uses:
        assert use.path.is_file(), f"module {use.symbol}: {use.path} does not exist"
        module = load_symbols(use.path)
        assert use.params - module.params == set(), f"module {use.symbol}: unknown parameters"
        required = module.params - module.params_with_default
        assert required - use.params == set(), (
            f"module {use.symbol}: required parameters not passed"
        )
    modules = {use.symbol: load_symbols(use.path) for use in symbols.module_uses}
    for symbol, output, line in symbols.module_output_refs:
        assert output in modules[symbol].outputs, (
            f"line {line}: module {symbol} has no output {output}"
        )


def test_main_wires_every_module() -> None:
    uses = {use.path.name for use in load_symbols(BICEP_DIR / "main.bicep").module_uses}
    assert uses == {p.name for p in (BICEP_DIR / "modules").glob("*.bicep")}


def test_storage_account_accepts_only_entra_id_over_tls_1_2_and_never_public_blobs() -> None:
    account = resource(BICEP_DIR / "modules/storage.bicep", "storageAccount")
    properties = account["config"]["properties"]
    assert properties["allowSharedKeyAccess"] is False
    assert properties["minimumTlsVersion"] == "TLS1_2"
    assert properties["allowBlobPublicAccess"] is False
    assert properties["supportsHttpsTrafficOnly"] is True
    container = resource(BICEP_DIR / "modules/storage.bicep", "container")
    assert container["config"]["properties"]["publicAccess"] == "None"


def test_ledger_blobs_keep_no_soft_deleted_copies_or_versions() -> None:
    blob_service = resource(BICEP_DIR / "modules/storage.bicep", "blobService")
    assert blob_service["type"] == "Microsoft.Storage/storageAccounts/blobServices"
    properties = blob_service["config"]["properties"]
    assert properties["deleteRetentionPolicy"] == {"enabled": False}
    assert properties["isVersioningEnabled"] is False
    assert properties["changeFeed"] == {"enabled": False}


def test_hint_segments_are_deleted_by_a_lifecycle_rule_and_nothing_else_is() -> None:
    policy = resource(BICEP_DIR / "modules/storage.bicep", "lifecycle")
    assert policy["type"] == "Microsoft.Storage/storageAccounts/managementPolicies"
    assert (
        policy["config"]["name"] == "default"
    )  # the one name Azure accepts for an account's policy
    rules = policy["config"]["properties"]["policy"]["rules"]
    assert len(rules) == 1 and rules[0]["enabled"] is True and rules[0]["type"] == "Lifecycle"
    filters, actions = rules[0]["definition"]["filters"], rules[0]["definition"]["actions"]
    # The rule covers exactly the segments hints.py writes (append blobs under its prefix) in our container.
    assert filters["prefixMatch"] == [f"${{containerName}}/{HINTS_PREFIX}"]
    assert filters["blobTypes"] == ["appendBlob"]
    assert segment_key(datetime(2026, 12, 1, 12, 0, tzinfo=UTC)).startswith(HINTS_PREFIX)
    # A reader reads the current and the previous minute only: a day's margin deletes nothing in use.
    assert actions == {"baseBlob": {"delete": {"daysAfterModificationGreaterThan": 1}}}


def test_blob_data_contributor_is_granted_on_the_container_only() -> None:
    path = BICEP_DIR / "modules/storage.bicep"
    assignment = resource(path, "containerDataContributor")
    assert assignment["type"] == "Microsoft.Authorization/roleAssignments"
    scope = assignment["config"]["scope"]
    assert (
        resource(path, scope)["type"] == "Microsoft.Storage/storageAccounts/blobServices/containers"
    )
    role = assignment["config"]["properties"]["roleDefinitionId"]["function"]["parameters"][
        "resource_name_1"
    ]
    assert parsed(path)["variables"][role]["value"] == BLOB_DATA_CONTRIBUTOR
    assert assignment["config"]["properties"]["principalType"] == "ServicePrincipal"
    main_storage = parsed(BICEP_DIR / "main.bicep")["modules"]["storage"]["config"]["params"]
    principal = main_storage["dataContributorPrincipalId"]["operator"]["operands"]
    assert principal["operand_1"] == "identity", "the role goes to the fleet's managed identity"


def test_federated_credential_trusts_the_charts_service_account_token() -> None:
    credential = resource(BICEP_DIR / "modules/identity.bicep", "federatedCredential")["config"]
    assert credential["parent"] == "identity"
    properties = credential["properties"]
    assert (
        properties["subject"]
        == "system:serviceaccount:${kubernetesNamespace}:${serviceAccountName}"
    )
    assert properties["audiences"] == ["api://AzureADTokenExchange"]
    assert properties["issuer"] == "oidcIssuerUrl"


def test_default_subject_names_the_service_account_the_chart_creates() -> None:
    parameters = parsed(BICEP_DIR / "main.bicep")["parameters"]
    rendered = render(REQUIRED)
    account = rendered.one("ServiceAccount")["metadata"]["name"]
    assert RELEASE == "entrabot-fleet"  # the install command the README documents
    assert (
        parameters["kubernetesNamespace"]["default"],
        parameters["serviceAccountName"]["default"],
    ) == (NAMESPACE, account)


def test_helm_values_output_is_accepted_by_the_chart() -> None:
    output = parsed(BICEP_DIR / "main.bicep")["outputs"]["helmValues"]["value"]
    # Deploy-time values for the expressions, in the shapes Azure returns them.
    examples = {
        "blobEndpoint": "https://entrabotabc.blob.core.windows.net/",
        "blobContainer": "entrabot",
        "tenantId": "72f988bf-86f1-41af-91ab-2d7cd011db47",
        "clientId": "0b9c5e4f-7a7e-4d56-9c3a-5d0c8f1e2a3b",
        "name": "entrabot-fleet",
    }

    def resolve(node: Any, key: str = "") -> Any:
        if isinstance(node, dict) and not ({"operator", "function"} & set(node)):
            return {k: resolve(v, k) for k, v in node.items()}
        if isinstance(node, bool):
            return node
        assert key in examples, (
            f"helmValues.{key}: add an example value for this output to the test"
        )
        return examples[key]

    values = resolve(output)
    # The operator adds the /mcp audience (docs/azure.md, step 7); Bicep cannot know it.
    rendered = render(merge(values, MCP_AUTH))
    env = rendered.env()
    assert env["ENTRABOT_BLOB_ENDPOINT"] == examples["blobEndpoint"]
    assert env["ENTRABOT_BLOB_CONTAINER"] == examples["blobContainer"]
    assert env["ENTRABOT_TENANT_ID"] == examples["tenantId"]
    account = rendered.one("ServiceAccount")["metadata"]
    assert account["annotations"]["azure.workload.identity/client-id"] == examples["clientId"]
    assert (
        account["name"]
        == parsed(BICEP_DIR / "main.bicep")["parameters"]["serviceAccountName"]["default"]
    )


def test_aks_has_the_oidc_issuer_and_workload_identity_the_identity_relies_on() -> None:
    cluster = resource(BICEP_DIR / "modules/aks.bicep", "cluster")["config"]["properties"]
    assert cluster["oidcIssuerProfile"] == {"enabled": True}
    assert cluster["securityProfile"]["workloadIdentity"] == {"enabled": True}
    assert cluster["networkProfile"]["networkPolicy"] == "cilium", (
        "the chart's NetworkPolicy needs enforcement"
    )
    assert cluster["azureMonitorProfile"]["metrics"]["enabled"] == "prometheusEnabled"
    main = parsed(BICEP_DIR / "main.bicep")
    assert main["modules"]["aks"]["config"]["condition"] == "deployAks"
    assert main["modules"]["monitoring"]["config"]["condition"] == "monitoringEnabled"


def test_managed_prometheus_sends_the_clusters_metrics_to_the_monitor_workspace() -> None:
    path = BICEP_DIR / "modules/monitoring.bicep"
    rule = resource(path, "collectionRule")["config"]["properties"]
    (source,) = rule["dataSources"]["prometheusForwarder"]
    assert source["streams"] == ["Microsoft-PrometheusMetrics"]
    (destination,) = rule["destinations"]["monitoringAccounts"]
    assert (
        destination["accountResourceId"]["operator"]["operands"]["operand_1"] == "monitorWorkspace"
    )
    assert rule["dataFlows"] == [
        {"streams": ["Microsoft-PrometheusMetrics"], "destinations": [destination["name"]]}
    ]
    association = resource(BICEP_DIR / "modules/aks.bicep", "prometheusRuleAssociation")
    assert association["config"]["config"]["scope"] == "cluster"


# --- issue 16: descriptions, hardening, private endpoint, diagnostics, registry ---------------------

ACR_PULL = "7f951dda-4ed3-4680-a7ca-43fe172d538d"


def conditional_config(path: Path, symbol: str) -> tuple[str | None, dict[str, Any]]:
    """(condition, body) of a resource or module, whether or not it is conditional."""
    document = parsed(path)
    entry = (
        document["resources"] if symbol in document.get("resources", {}) else document["modules"]
    )[symbol]
    config = entry["config"]
    return (config["condition"], config["config"]) if "condition" in config else (None, config)


@pytest.mark.parametrize("path", BICEP_FILES, ids=ids(BICEP_FILES))
def test_every_parameter_says_what_it_is_for(path: Path) -> None:
    undescribed = [
        name
        for name, parameter in parsed(path)["parameters"].items()
        if not any(d["type"] == "description" and d["argument"] for d in parameter["decorators"])
    ]
    assert undescribed == []


def test_aks_has_no_local_accounts_and_upgrades_itself() -> None:
    cluster = resource(BICEP_DIR / "modules/aks.bicep", "cluster")["config"]["properties"]
    assert cluster["disableLocalAccounts"] is True
    assert cluster["aadProfile"]["managed"] is True, (
        "without local accounts, Entra ID is the only way in"
    )
    assert cluster["autoUpgradeProfile"] == {
        "upgradeChannel": "upgradeChannel",
        "nodeOSUpgradeChannel": "nodeOsUpgradeChannel",
    }
    defaults = parsed(BICEP_DIR / "main.bicep")["parameters"]
    assert defaults["aksUpgradeChannel"]["default"] == "patch"
    assert defaults["aksNodeOsUpgradeChannel"]["default"] == "NodeImage"


def test_a_storage_private_endpoint_turns_public_access_off_and_resolves_privately() -> None:
    path = BICEP_DIR / "modules/storage.bicep"
    account = resource(path, "storageAccount")["config"]["properties"]
    assert account["publicNetworkAccess"]["operator"]["operands"] == {
        "condition": "privateNetwork",
        "true_value": "Disabled",
        "false_value": "Enabled",
    }
    assert account["networkAcls"]["defaultAction"]["operator"]["operands"]["true_value"] == "Deny"
    condition, endpoint = conditional_config(path, "privateEndpoint")
    assert condition == "privateNetwork"
    (connection,) = endpoint["properties"]["privateLinkServiceConnections"]
    assert connection["properties"]["groupIds"] == ["blob"]
    for symbol in ("privateDnsZone", "privateDnsLink", "privateDnsZoneGroup"):
        assert conditional_config(path, symbol)[0] == "privateNetwork", symbol
    assert parsed(path)["parameters"]["privateEndpointSubnetId"]["default"] == "", (
        "off unless asked for"
    )


def test_diagnostic_settings_send_blob_access_and_cluster_audit_logs_to_the_workspace() -> None:
    _, blob = conditional_config(BICEP_DIR / "modules/storage.bicep", "blobDiagnostics")
    assert blob["scope"] == "blobService"
    assert {log["category"] for log in blob["properties"]["logs"]} == {
        "StorageRead",
        "StorageWrite",
        "StorageDelete",
    }
    _, cluster = conditional_config(BICEP_DIR / "modules/aks.bicep", "clusterDiagnostics")
    assert cluster["scope"] == "cluster"
    assert "kube-audit-admin" in {log["category"] for log in cluster["properties"]["logs"]}
    for module in ("storage", "aks", "registry"):
        assert (
            conditional_config(BICEP_DIR / "main.bicep", module)[1]["params"][
                "diagnosticsWorkspaceId"
            ]
            == "diagnosticsWorkspace"
        ), module


def test_the_optional_registry_lets_the_kubelet_pull_with_entra_id_only() -> None:
    path = BICEP_DIR / "modules/registry.bicep"
    registry = resource(path, "registry")["config"]["properties"]
    assert registry["adminUserEnabled"] is False and registry["anonymousPullEnabled"] is False
    _, pull = conditional_config(path, "kubeletPull")
    assert pull["scope"] == "registry"
    role = pull["properties"]["roleDefinitionId"]["function"]["parameters"]["resource_name_1"]
    assert parsed(path)["variables"][role]["value"] == ACR_PULL
    condition, module = conditional_config(BICEP_DIR / "main.bicep", "registry")
    assert condition == "deployRegistry"
    principal = module["params"]["pullPrincipalId"]["operator"]["operands"]
    assert principal["condition"] == "deployAks"
    assert principal["true_value"]["operator"]["operands"]["operand_1"] == "aks"
    assert principal["false_value"] == "kubeletPrincipalId"

"""The Helm chart renders objects valid for Kubernetes 1.29-1.33, pins MCP sessions to their replica,
runs the pods locked down, wires workload identity, and refuses values that cannot work."""

from __future__ import annotations

from typing import Any

import helm_python
import kubernetes_validate
import pytest
import yaml

from tests.deploy.chart_rendering import (
    ALL_FEATURES,
    CLIENT_ID,
    DELEGATED,
    FULLNAME,
    MCP_AUTH,
    NAMESPACE,
    REQUIRED,
    TENANT_ID,
    Rendered,
    merge,
    render,
)
from tests.deploy.deploy_facts import (
    CHART_DIR,
    DASHBOARD,
    DATA_DIR,
    PROMETHEUS_ALERTS,
    REPO_ROOT,
    unknown_settings,
)

KUBERNETES_VERSIONS = ("1.29", "1.30", "1.31", "1.32", "1.33")
FEDERATED_TOKEN_FILE = "/var/run/secrets/azure/tokens/azure-identity-token"
CERTIFICATE = {
    "blueprint": {
        "clientId": "b1de9a14-0000-4f6f-8000-000000b1de9a",
        "credential": "certificate",
        "certificate": {
            "secretName": "blueprint-cert",
            "key": "blueprint.pem",
            "privateKeyKey": "blueprint.key",
        },
    },
    "secrets": {"existingSecret": "entrabot-secrets"},
}
BLUEPRINT_SECRET = {
    "blueprint": {"clientId": "b1de9a14-0000-4f6f-8000-000000b1de9a", "credential": "secret"},
    "secrets": {
        "blueprintClientSecret": "s3cret",
        "blobConnectionString": "UseDevelopmentStorage=true",
    },
}
NOTIFICATION_URL = "https://agents.example.com/graph/notifications"
NOTIFY = {
    "config": {"notificationUrl": NOTIFICATION_URL},
    "secrets": {"notificationClientState": "a-random-state"},
}
INGRESS = {
    "ingress": {"enabled": True, "host": "agents.example.com", "tls": {"secretName": "agents-tls"}}
}
GATEWAY = {
    "gatewayApi": {
        "enabled": True,
        "parentRefs": [{"name": "public", "namespace": "gateways"}],
        "hostnames": ["agents.example.com"],
    }
}
# Graph change notifications through both front doors.
NOTIFIED = merge(REQUIRED, INGRESS, GATEWAY, NOTIFY)
AZURE_PROMETHEUS = {
    "metrics": {"serviceMonitor": {"enabled": True, "flavor": "azure-managed-prometheus"}}
}

VARIANTS = {
    "defaults": REQUIRED,
    "all-features": ALL_FEATURES,
    "blueprint-certificate": merge(REQUIRED, CERTIFICATE),
    "blueprint-secret": merge(REQUIRED, BLUEPRINT_SECRET),
    "azure-managed-prometheus": merge(ALL_FEATURES, AZURE_PROMETHEUS),
    "single-replica-trial": merge(MCP_AUTH, {"replicaCount": 1}),
    # The HTTPRoute is a CRD without a schema offline: its notification rule is checked below.
    "notifications-through-the-ingress": merge(REQUIRED, INGRESS, NOTIFY),
    "delegated": merge(REQUIRED, DELEGATED),
}


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def variant(request: pytest.FixtureRequest) -> Rendered:
    return render(VARIANTS[request.param])


@pytest.fixture(scope="module")
def defaults() -> Rendered:
    return render(REQUIRED)


@pytest.fixture(scope="module")
def full() -> Rendered:
    return render(ALL_FEATURES)


def pod_spec(rendered: Rendered) -> dict[str, Any]:
    return rendered.one("Deployment")["spec"]["template"]["spec"]


def container(rendered: Rendered) -> dict[str, Any]:
    return pod_spec(rendered)["containers"][0]


# --- validity ----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_rendered_object_is_valid_kubernetes(variant: Rendered, version: str) -> None:
    checked = 0
    for obj in variant.objects:
        if obj["apiVersion"].endswith("coreos.com/v1"):
            continue  # a CRD (ServiceMonitor): no schema ships offline; checked structurally below
        kubernetes_validate.validate(obj, version, strict=True)
        checked += 1
    assert checked >= 6


def test_strict_validation_catches_a_misplaced_field(defaults: Rendered) -> None:
    deployment = merge(
        defaults.one("Deployment"),
        {"spec": {"template": {"spec": {"sessionAffinity": "ClientIP"}}}},
    )
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[0], strict=True)


@pytest.mark.parametrize(
    "values", [REQUIRED, ALL_FEATURES, NOTIFIED], ids=["defaults", "all-features", "notifications"]
)
def test_chart_lints_strictly(values: dict[str, Any]) -> None:
    for version in ("v1.29.0", "v1.33.0"):
        report = helm_python.lint(CHART_DIR, values, strict=True, kube_version=version)
        problems = [m for m in report["messages"] if m["severity"] >= 2]
        assert (report["errors"], problems) == ([], [])


def test_chart_metadata_names_the_projects_home_and_sources_as_pyproject_declares_them() -> None:
    import tomllib  # noqa: PLC0415
    from urllib.parse import urlsplit  # noqa: PLC0415

    metadata = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    urls = [metadata["home"], *metadata["sources"]]
    assert len(urls) >= 2 and all(
        urlsplit(u).scheme == "https" and urlsplit(u).netloc for u in urls
    ), urls
    declared = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"].get("urls", {})
    if "Homepage" in declared:
        assert metadata["home"] == declared["Homepage"]
    for key in ("Source", "Repository"):
        if key in declared:
            assert declared[key] in metadata["sources"]


def test_every_entrabot_variable_the_chart_sets_is_a_setting(variant: Rendered) -> None:
    env = variant.env()
    assert "ENTRABOT_REPLICA_ID" in env
    assert unknown_settings(env) == []


# --- values the chart refuses ------------------------------------------------------------------


@pytest.mark.parametrize(
    "values",
    [
        {"replicaCount": 0},
        {"replicas": 3},
        {"config": {"blobAuth": "account_key"}},
        {"config": {"blobEndpoint": "blob.core.windows.net"}},
        {"config": {"extraEnv": {"AZURE_CLIENT_ID": "x"}}},
        {"workloadIdentity": {"enabled": True}},
        {"workloadIdentity": {"enabled": True, "clientId": "not-a-guid"}},
        {"metrics": {"serviceMonitor": {"flavor": "datadog"}}},
        {"service": {"sessionAffinityTimeoutSeconds": 90000}},
        {"podSecurityContext": {"runAsUser": 0}},
        {"config": {"authMode": "delegated_by_password"}},
        {"secrets": {"delegatedTokenKey": "not-32-bytes"}},
        {"prometheusRule": {"enabled": True, "severity": "page"}},
    ],
    ids=[
        "zero-replicas",
        "unknown-key",
        "bad-blob-auth",
        "endpoint-without-scheme",
        "foreign-extra-env",
        "identity-without-client-id",
        "client-id-not-guid",
        "unknown-monitor-flavour",
        "affinity-over-a-day",
        "root",
        "unknown-auth-mode",
        "delegated-key-not-32-bytes",
        "unknown-rule-option",
    ],
)
def test_schema_rejects_bad_values(values: dict[str, Any]) -> None:
    with pytest.raises(helm_python.HelmValuesError):
        render(merge(REQUIRED, values))


def test_several_replicas_without_the_shared_blob_ledger_are_refused() -> None:
    with pytest.raises(helm_python.HelmRenderError, match="config.blobEndpoint is empty"):
        render({})
    with pytest.raises(helm_python.HelmRenderError, match="config.blobEndpoint is empty"):
        render({"replicaCount": 1, "autoscaling": {"enabled": True}})


def test_affinity_shorter_than_the_session_idle_timeout_is_refused() -> None:
    values = merge(
        REQUIRED,
        {
            "service": {"sessionAffinityTimeoutSeconds": 600},
            "config": {"mcpSessionIdleTimeoutSeconds": 1800},
        },
    )
    with pytest.raises(helm_python.HelmRenderError, match="sessionAffinityTimeoutSeconds"):
        render(values)


def test_mcp_without_authentication_is_refused_as_the_service_refuses_it() -> None:
    blob_only = {"config": {"blobEndpoint": REQUIRED["config"]["blobEndpoint"]}}
    with pytest.raises(helm_python.HelmRenderError, match="/mcp has no authentication"):
        render(blob_only)
    render(merge(blob_only, {"secrets": {"mcpStaticTokens": "token-one"}}))
    render(merge(blob_only, {"secrets": {"existingSecret": "entrabot-secrets"}}))


def test_a_jwt_audience_without_its_tenant_is_refused_as_the_service_refuses_it() -> None:
    with pytest.raises(helm_python.HelmRenderError, match="config.tenantId is not"):
        render(merge(REQUIRED, {"config": {"tenantId": ""}}))


@pytest.mark.parametrize(
    ("roles", "scopes"),
    [
        ("", ""),
        (" , ", ""),
        ("Entrabot.Host", ""),
        ("", "Mcp.Access"),
        ("Entrabot.Host", "Mcp.Access"),
    ],
    ids=["neither", "blank-names", "role", "scope", "both"],
)
def test_a_jwt_audience_without_a_required_role_or_scope_is_refused_as_the_service_refuses_it(
    roles: str, scopes: str
) -> None:
    from service.config import Settings  # noqa: PLC0415 - the chart must refuse what the service refuses
    from service.from_settings.mcp import AuthConfigError, check_auth_config  # noqa: PLC0415

    config = {
        "mcpJwtAudience": "api://entrabot-fleet",
        "tenantId": TENANT_ID,
        "mcpJwtRequiredRoles": roles,
        "mcpJwtRequiredScopes": scopes,
    }
    settings = Settings(
        _env_file=None,
        host="0.0.0.0",
        mcp_jwt_audience=config["mcpJwtAudience"],
        tenant_id=TENANT_ID,
        mcp_jwt_required_roles=roles or None,
        mcp_jwt_required_scopes=scopes or None,
    )
    try:
        check_auth_config(settings)
        service_refuses = False
    except AuthConfigError:
        service_refuses = True
    values = merge(REQUIRED, {"config": config})
    if service_refuses:
        with pytest.raises(
            helm_python.HelmRenderError, match="neither config.mcpJwtRequiredRoles nor"
        ):
            render(values)
    else:
        env = render(values).env()
        assert (
            env.get("ENTRABOT_MCP_JWT_REQUIRED_ROLES", ""),
            env.get("ENTRABOT_MCP_JWT_REQUIRED_SCOPES", ""),
        ) == (roles, scopes)
    assert service_refuses == (not roles.strip(" ,") and not scopes.strip(" ,"))


def test_blueprint_workload_identity_without_workload_identity_is_refused() -> None:
    with pytest.raises(helm_python.HelmRenderError, match="workloadIdentity.enabled is false"):
        render(merge(REQUIRED, {"blueprint": {"clientId": "b1de9a14-0000-4f6f-8000-000000b1de9a"}}))


# --- the pods --------------------------------------------------------------------------------


def test_pods_run_as_fixed_non_root_user_with_read_only_root_and_no_capabilities(
    variant: Rendered,
) -> None:
    pod = pod_spec(variant)
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "runAsGroup": 10001,
        "fsGroup": 10001,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert container(variant)["securityContext"] == {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert pod["automountServiceAccountToken"] is False


def test_only_tmp_and_the_data_dir_are_writable_emptydirs(variant: Rendered) -> None:
    mounts = {
        m["mountPath"]: m["name"]
        for m in container(variant)["volumeMounts"]
        if not m.get("readOnly")
    }
    assert set(mounts) == {"/tmp", DATA_DIR}
    volumes = {v["name"]: v for v in pod_spec(variant)["volumes"]}
    assert all("emptyDir" in volumes[name] for name in mounts.values())
    assert variant.env()["ENTRABOT_DATA_DIR"] == DATA_DIR


def test_probes_use_healthz_for_liveness_and_startup_and_readyz_for_readiness(
    defaults: Rendered,
) -> None:
    spec = container(defaults)
    port = spec["ports"][0]
    assert (port["name"], port["containerPort"]) == ("http", 8080)
    assert spec["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert spec["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert spec["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert defaults.env()["ENTRABOT_PORT"] == "8080"
    assert defaults.env()["ENTRABOT_HOST"] == "0.0.0.0"


def test_rollouts_add_a_pod_before_removing_one_and_sigterm_gets_its_grace(
    defaults: Rendered,
) -> None:
    deployment = defaults.one("Deployment")
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
    }
    assert deployment["spec"]["replicas"] == 3
    assert pod_spec(defaults)["terminationGracePeriodSeconds"] == 30
    assert container(defaults)["args"] == ["serve"]


def test_replicas_spread_over_zones_and_hosts(defaults: Rendered) -> None:
    constraints = pod_spec(defaults)["topologySpreadConstraints"]
    assert [c["topologyKey"] for c in constraints] == [
        "topology.kubernetes.io/zone",
        "kubernetes.io/hostname",
    ]
    selector = defaults.one("Deployment")["spec"]["selector"]["matchLabels"]
    assert all(c["labelSelector"]["matchLabels"] == selector for c in constraints)


def test_replica_id_is_the_pod_name(defaults: Rendered) -> None:
    env = {e["name"]: e for e in container(defaults)["env"]}
    assert env["ENTRABOT_REPLICA_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


# --- sessions and the Service ------------------------------------------------------------------


def test_service_pins_each_client_to_one_replica_for_longer_than_a_session_idles(
    defaults: Rendered,
) -> None:
    spec = defaults.one("Service")["spec"]
    assert spec["type"] == "ClusterIP"
    assert spec["sessionAffinity"] == "ClientIP"
    idle = float(defaults.env()["ENTRABOT_MCP_SESSION_IDLE_TIMEOUT_S"])
    assert spec["sessionAffinityConfig"]["clientIP"]["timeoutSeconds"] >= idle
    assert spec["selector"] == defaults.one("Deployment")["spec"]["selector"]["matchLabels"]
    assert spec["ports"][0]["targetPort"] == "http"


def test_mcp_answers_the_service_names_and_configured_hosts(full: Rendered) -> None:
    hosts = full.env()["ENTRABOT_MCP_ALLOWED_HOSTS"].split(",")
    assert {FULLNAME, f"{FULLNAME}.{NAMESPACE}.svc.cluster.local", "agents.example.com"} <= set(
        hosts
    )


# --- identity and secrets ----------------------------------------------------------------------


def test_workload_identity_labels_the_pod_and_annotates_the_service_account(full: Rendered) -> None:
    labels = full.one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert labels["azure.workload.identity/use"] == "true"
    account = full.one("ServiceAccount")
    assert account["metadata"]["annotations"]["azure.workload.identity/client-id"] == CLIENT_ID
    assert account["metadata"]["annotations"]["azure.workload.identity/tenant-id"] == TENANT_ID
    assert pod_spec(full)["serviceAccountName"] == account["metadata"]["name"]
    assert full.env()["ENTRABOT_BLUEPRINT_FEDERATED_TOKEN_FILE"] == FEDERATED_TOKEN_FILE


def test_without_workload_identity_the_pod_is_not_labelled(defaults: Rendered) -> None:
    labels = defaults.one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert "azure.workload.identity/use" not in labels
    assert "annotations" not in defaults.one("ServiceAccount")["metadata"]
    assert "ENTRABOT_BLUEPRINT_FEDERATED_TOKEN_FILE" not in defaults.env()
    assert "workload identity is off" in defaults.notes.lower()


def test_blob_endpoint_and_container_are_set_together(defaults: Rendered) -> None:
    env = defaults.env()
    assert (env["ENTRABOT_BLOB_ENDPOINT"], env["ENTRABOT_BLOB_CONTAINER"]) == (
        REQUIRED["config"]["blobEndpoint"],
        "entrabot",
    )
    trial = render(merge(MCP_AUTH, {"replicaCount": 1})).env()
    assert "ENTRABOT_BLOB_ENDPOINT" not in trial and "ENTRABOT_BLOB_CONTAINER" not in trial


def test_secret_values_go_to_a_created_secret_not_the_configmap(full: Rendered) -> None:
    secret = full.one("Secret")
    assert set(secret["data"]) == {"ENTRABOT_MCP_STATIC_TOKENS"}
    assert "ENTRABOT_MCP_STATIC_TOKENS" not in full.data("ConfigMap", FULLNAME)
    assert {"secretRef": {"name": secret["metadata"]["name"]}} in container(full)["envFrom"]


def test_existing_secret_is_read_and_none_is_created_and_certificate_is_mounted() -> None:
    rendered = render(merge(REQUIRED, CERTIFICATE))
    assert rendered.all("Secret") == []
    assert {"secretRef": {"name": "entrabot-secrets"}} in container(rendered)["envFrom"]
    mount = next(
        m for m in container(rendered)["volumeMounts"] if m["name"] == "blueprint-certificate"
    )
    assert mount["readOnly"] is True
    assert (
        rendered.env()["ENTRABOT_BLUEPRINT_CERTIFICATE_PATH"]
        == f"{mount['mountPath']}/blueprint.pem"
    )
    assert (
        rendered.env()["ENTRABOT_BLUEPRINT_CERTIFICATE_KEY_PATH"]
        == f"{mount['mountPath']}/blueprint.key"
    )
    volume = next(v for v in pod_spec(rendered)["volumes"] if v["name"] == "blueprint-certificate")
    assert [i["key"] for i in volume["secret"]["items"]] == ["blueprint.pem", "blueprint.key"]


# --- optional objects --------------------------------------------------------------------------


def test_autoscaling_replaces_the_fixed_replica_count(full: Rendered) -> None:
    assert "replicas" not in full.one("Deployment")["spec"]
    hpa = full.one("HorizontalPodAutoscaler", "autoscaling/v2")
    assert hpa["spec"]["scaleTargetRef"]["name"] == full.one("Deployment")["metadata"]["name"]
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 8)


@pytest.mark.parametrize(
    ("values", "api_version"),
    [
        (ALL_FEATURES, "monitoring.coreos.com/v1"),
        (merge(ALL_FEATURES, AZURE_PROMETHEUS), "azmonitoring.coreos.com/v1"),
    ],
    ids=["prometheus-operator", "azure-managed-prometheus"],
)
def test_service_monitor_scrapes_the_service_metrics_port(
    values: dict[str, Any], api_version: str
) -> None:
    rendered = render(values)
    monitor = rendered.one("ServiceMonitor", api_version)
    service = rendered.one("Service")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [NAMESPACE]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    assert set(monitor["spec"]) == {"selector", "namespaceSelector", "endpoints"}
    assert set(endpoint) == {"port", "path", "interval"}


def test_prometheus_rule_carries_the_canonical_alerting_rules(full: Rendered) -> None:
    rule = full.one("PrometheusRule", "monitoring.coreos.com/v1")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["spec"] == yaml.safe_load(PROMETHEUS_ALERTS.read_text())
    alerts = [r["alert"] for group in rule["spec"]["groups"] for r in group["rules"]]
    assert "EntrabotNoReadyReplica" in alerts and "{{ $labels.loop }}" in str(rule["spec"])


def test_optional_objects_are_off_by_default(defaults: Rendered) -> None:
    # Hooks (the `helm test` pod) are not installed with the release.
    kinds = sorted(
        o["kind"]
        for o in defaults.objects
        if "helm.sh/hook" not in (o["metadata"].get("annotations") or {})
    )
    assert kinds == [
        "ConfigMap",
        "ConfigMap",
        "Deployment",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "Service",
        "ServiceAccount",
    ]


def test_network_policy_admits_port_8080_and_lets_out_only_dns_and_https(
    defaults: Rendered,
) -> None:
    policy = defaults.one("NetworkPolicy")["spec"]
    assert (
        policy["podSelector"]["matchLabels"]
        == defaults.one("Deployment")["spec"]["selector"]["matchLabels"]
    )
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    (ingress,) = policy["ingress"]
    assert ingress["ports"] == [{"port": 8080, "protocol": "TCP"}]
    assert ingress["from"], "ingress comes from selected peers only"
    egress_ports = [
        sorted((p["port"], p["protocol"]) for p in rule["ports"]) for rule in policy["egress"]
    ]
    assert egress_ports == [[(53, "TCP"), (53, "UDP")], [(443, "TCP")]]


def test_pod_disruption_budget_keeps_all_but_one_replica(defaults: Rendered) -> None:
    pdb = defaults.one("PodDisruptionBudget")["spec"]
    assert pdb["maxUnavailable"] == 1
    assert (
        pdb["selector"]["matchLabels"]
        == defaults.one("Deployment")["spec"]["selector"]["matchLabels"]
    )


def test_dashboard_configmap_carries_the_canonical_dashboard_for_the_grafana_sidecar(
    defaults: Rendered,
) -> None:
    (dashboard,) = [
        o for o in defaults.all("ConfigMap") if o["metadata"]["name"].endswith("-dashboard")
    ]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["data"] == {DASHBOARD.name: DASHBOARD.read_text()}


def test_config_change_rolls_the_pods() -> None:
    def checksum(values: dict[str, Any]) -> str:
        return render(values).one("Deployment")["spec"]["template"]["metadata"]["annotations"][
            "checksum/config"
        ]

    assert checksum(REQUIRED) != checksum(merge(REQUIRED, {"config": {"logLevel": "DEBUG"}}))


# --- reaching the fleet from outside: ingress, Gateway API, helm test ------------------------------


def test_the_ingress_hashes_the_bridges_affinity_header_and_keeps_push_streams_open() -> None:
    rendered = render(merge(REQUIRED, INGRESS))
    ingress = rendered.one("Ingress", "networking.k8s.io/v1")
    annotations = ingress["metadata"]["annotations"]
    assert (
        annotations["nginx.ingress.kubernetes.io/upstream-hash-by"] == "$http_x_entrabot_affinity"
    )
    assert annotations["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"
    assert int(annotations["nginx.ingress.kubernetes.io/proxy-read-timeout"]) >= 3600
    assert ingress["spec"]["tls"] == [{"hosts": ["agents.example.com"], "secretName": "agents-tls"}]
    [rule] = ingress["spec"]["rules"]
    assert rule["host"] == "agents.example.com"
    assert {p["path"] for p in rule["http"]["paths"]} == {
        "/mcp",
        "/.well-known/oauth-protected-resource",
    }
    assert {p["backend"]["service"]["name"] for p in rule["http"]["paths"]} == {FULLNAME}
    assert "agents.example.com" in rendered.env()["ENTRABOT_MCP_ALLOWED_HOSTS"].split(",")


def test_the_bridge_sends_the_header_the_ingress_hashes() -> None:
    from service.bridge.config import AFFINITY_HEADER  # noqa: PLC0415 - the chart's default must follow the bridge

    values = yaml_values()
    assert values["ingress"]["affinityHeader"] == AFFINITY_HEADER


def test_the_deploy_readme_describes_every_object_the_chart_makes_and_the_header_to_pin_on() -> (
    None
):
    from service.bridge.config import AFFINITY_HEADER  # noqa: PLC0415 - the README must follow the bridge

    readme = (REPO_ROOT / "deploy" / "README.md").read_text()
    section = readme[
        readme.index("## What the chart sets up") : readme.index(
            "\n## ", readme.index("## What the chart")
        )
    ]
    rendered = render(merge(ALL_FEATURES, INGRESS, GATEWAY, NOTIFY))
    names = {"HorizontalPodAutoscaler": "HorizontalPodAutoscaler", "Pod": "helm test"}
    assert [
        kind
        for kind in sorted({o["kind"] for o in rendered.objects})
        if names.get(kind, kind) not in section
    ] == []
    assert f"**`{AFFINITY_HEADER}`**" in section
    hashed_on = rendered.one("Ingress")["metadata"]["annotations"][
        "nginx.ingress.kubernetes.io/upstream-hash-by"
    ]
    assert f'nginx.ingress.kubernetes.io/upstream-hash-by: "{hashed_on}"' in " ".join(
        section.split()
    )


def test_an_ingress_without_a_host_is_refused() -> None:
    with pytest.raises(Exception, match="ingress.host"):
        render(merge(REQUIRED, {"ingress": {"enabled": True}}))


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_ingress_and_the_helm_test_are_valid_kubernetes(version: str) -> None:
    rendered = render(merge(REQUIRED, INGRESS))
    for obj in rendered.all("Ingress") + rendered.all("Pod"):
        kubernetes_validate.validate(obj, version, strict=True)


def test_the_http_route_attaches_to_the_gateway_with_header_session_persistence() -> None:
    rendered = render(merge(REQUIRED, GATEWAY))
    route = rendered.one("HTTPRoute", "gateway.networking.k8s.io/v1")
    assert route["spec"]["parentRefs"] == [{"name": "public", "namespace": "gateways"}]
    [rule] = route["spec"]["rules"]
    assert rule["backendRefs"] == [{"name": FULLNAME, "port": 8080}]
    assert rule["sessionPersistence"]["type"] == "Header"
    assert rule["sessionPersistence"]["sessionName"] == "X-Entrabot-Affinity"
    assert "agents.example.com" in rendered.env()["ENTRABOT_MCP_ALLOWED_HOSTS"].split(",")


def test_graphs_notification_path_is_routed_through_the_ingress_and_the_http_route_to_the_url_set() -> (
    None
):
    rendered = render(NOTIFIED)
    [rule] = rendered.one("Ingress", "networking.k8s.io/v1")["spec"]["rules"]
    [path] = [p for p in rule["http"]["paths"] if p["path"] == "/graph/notifications"]
    assert path["pathType"] == "Exact" and path["backend"]["service"] == {
        "name": FULLNAME,
        "port": {"name": "http"},
    }
    assert (
        rule["host"] == "agents.example.com"
    )  # the host ENTRABOT_NOTIFICATION_URL names, under the TLS secret
    route = rendered.one("HTTPRoute", "gateway.networking.k8s.io/v1")
    [notify] = [
        r
        for r in route["spec"]["rules"]
        if r["matches"][0]["path"]["value"] == "/graph/notifications"
    ]
    assert notify["matches"] == [
        {"path": {"type": "Exact", "value": "/graph/notifications"}, "method": "POST"}
    ]
    assert (
        notify["backendRefs"] == [{"name": FULLNAME, "port": 8080}]
        and "sessionPersistence" not in notify
    )
    assert rendered.data("ConfigMap", FULLNAME)["ENTRABOT_NOTIFICATION_URL"] == NOTIFICATION_URL
    assert "ENTRABOT_NOTIFICATION_CLIENT_STATE" in rendered.one("Secret")["data"]
    assert "ENTRABOT_NOTIFICATION_CLIENT_STATE" not in rendered.data("ConfigMap", FULLNAME)
    assert NOTIFICATION_URL in rendered.notes


def test_the_notification_path_is_the_receivers_and_is_not_routed_without_a_notification_url() -> (
    None
):
    from service.notifications.receiver import NOTIFICATIONS_PATH  # noqa: PLC0415 - the chart must follow the service

    assert NOTIFICATION_URL.endswith(NOTIFICATIONS_PATH)
    rendered = render(merge(REQUIRED, INGRESS, GATEWAY))
    [rule] = rendered.one("Ingress")["spec"]["rules"]
    assert NOTIFICATIONS_PATH not in {p["path"] for p in rule["http"]["paths"]}
    assert len(rendered.one("HTTPRoute")["spec"]["rules"]) == 1
    assert "ENTRABOT_NOTIFICATION_URL" not in rendered.env()


@pytest.mark.parametrize(
    "url",
    ["http://agents.example.com/graph/notifications", "https://agents.example.com/hooks"],
    ids=["plain-http", "another-path"],
)
def test_a_notification_url_graph_cannot_use_or_that_misses_the_route_is_refused(url: str) -> None:
    with pytest.raises(helm_python.HelmValuesError):
        render(merge(NOTIFIED, {"config": {"notificationUrl": url}}))


def test_a_notification_url_without_its_client_state_is_refused_as_the_service_refuses_it() -> None:
    with pytest.raises(helm_python.HelmRenderError, match="secrets.notificationClientState"):
        render(merge(REQUIRED, INGRESS, {"config": {"notificationUrl": NOTIFICATION_URL}}))
    render(
        merge(
            REQUIRED,
            INGRESS,
            {
                "config": {"notificationUrl": NOTIFICATION_URL},
                "secrets": {"existingSecret": "entrabot-secrets"},
            },
        )
    )


def test_a_notification_url_in_extra_env_is_refused_for_the_setting_that_routes_it() -> None:
    with pytest.raises(helm_python.HelmRenderError, match="config.notificationUrl instead"):
        render(
            merge(
                REQUIRED, {"config": {"extraEnv": {"ENTRABOT_NOTIFICATION_URL": NOTIFICATION_URL}}}
            )
        )


def test_helm_test_reaches_readyz_through_the_service(defaults: Rendered) -> None:
    [pod] = defaults.all("Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    script = pod["spec"]["containers"][0]["args"][0]
    assert f"http://{FULLNAME}:8080/readyz" in script
    assert pod["spec"]["containers"][0]["image"] == container(defaults)["image"]


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a Kubernetes label selector (a Service's plain map, or matchLabels/matchExpressions) selects labels."""
    if "matchLabels" not in selector and "matchExpressions" not in selector:
        selector = {"matchLabels": selector}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = (
            expression["key"],
            expression["operator"],
            expression.get("values") or [],
        )
        if not {
            "In": key in labels and labels[key] in values,
            "NotIn": labels.get(key) not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[operator]:
            return False
    return True


def pod_selectors(node: object, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every selector of pods in an object, with where it is; NetworkPolicy peers (`from`, `to`) are sources."""
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("from", "to"):
                continue
            if key in ("selector", "podSelector", "labelSelector") and isinstance(value, dict):
                found.append((f"{path}.{key}", value))
            found.extend(pod_selectors(value, f"{path}.{key}"))
    elif isinstance(node, list):
        for index, item in enumerate(node):
            found.extend(pod_selectors(item, f"{path}[{index}]"))
    return found


@pytest.mark.parametrize(
    "values", [REQUIRED, merge(ALL_FEATURES, INGRESS)], ids=["defaults", "all-features"]
)
def test_the_helm_test_pod_is_selected_by_nothing_of_the_release_and_the_network_policy_admits_it(
    values: dict[str, Any],
) -> None:
    rendered = render(values)
    [pod] = rendered.all("Pod")
    labels = pod["metadata"]["labels"]
    assert (
        labels["app.kubernetes.io/instance"] == "entrabot-fleet"
        and labels["app.kubernetes.io/managed-by"] == "Helm"
    )
    assert {"helm.sh/chart", "app.kubernetes.io/name", "app.kubernetes.io/part-of"} <= set(labels)
    selected_by = [
        f"{o['kind']}{where}"
        for o in rendered.objects
        if o is not pod
        # a ServiceMonitor selects Services, not pods
        and o["kind"] != "ServiceMonitor"
        for where, selector in pod_selectors(o)
        if selects(selector, labels)
    ]
    assert selected_by == []
    # The test reaches the replicas' port through the Service: the replicas' NetworkPolicy must let it in.
    policy = rendered.one("NetworkPolicy")["spec"]
    service_port = rendered.one("Service")["spec"]["ports"][0]
    assert service_port["targetPort"] == "http"
    [http_port] = [p["containerPort"] for p in container(rendered)["ports"] if p["name"] == "http"]
    assert any(
        {"port": http_port, "protocol": "TCP"} in rule["ports"]
        # a bare podSelector peer means pods of the policy's own namespace, where `helm test` runs the pod
        and any(
            set(peer) == {"podSelector"} and selects(peer["podSelector"], labels)
            for peer in rule["from"]
        )
        for rule in policy["ingress"]
    )


def test_the_network_policy_admits_the_helm_test_pod_even_when_no_other_source_is_admitted() -> (
    None
):
    closed = render(
        merge(
            REQUIRED,
            {
                "networkPolicy": {
                    "ingressFrom": [],
                    "ingressControllerNamespace": "",
                    "prometheusNamespace": "",
                }
            },
        )
    )
    [pod] = closed.all("Pod")
    [rule] = closed.one("NetworkPolicy")["spec"]["ingress"]
    [peer] = rule["from"]
    assert selects(peer["podSelector"], pod["metadata"]["labels"])
    assert not selects(
        peer["podSelector"], closed.one("Deployment")["spec"]["template"]["metadata"]["labels"]
    )


def test_network_policy_admits_the_ingress_controller_and_prometheus_namespaces(
    defaults: Rendered,
) -> None:
    policy = defaults.one("NetworkPolicy")
    sources = policy["spec"]["ingress"][0]["from"]
    namespaces = {
        s["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
        for s in sources
        if "namespaceSelector" in s
    }
    assert {"ingress-nginx", "monitoring", "kube-system"} <= namespaces
    custom = render(
        merge(
            REQUIRED,
            {
                "networkPolicy": {
                    "ingressControllerNamespace": "",
                    "prometheusNamespace": "observability",
                }
            },
        )
    )
    sources = custom.one("NetworkPolicy")["spec"]["ingress"][0]["from"]
    names = {
        s["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
        for s in sources
        if "namespaceSelector" in s
    }
    assert "ingress-nginx" not in names and "observability" in names


def yaml_values() -> dict[str, Any]:
    import yaml  # noqa: PLC0415

    return yaml.safe_load((CHART_DIR / "values.yaml").read_text())

"""Renders the Helm chart offline (helm-python-sdk embeds Helm) into plain Kubernetes objects."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import helm_python
import yaml

from tests.deploy.deploy_facts import CHART_DIR

RELEASE = "entrabot-fleet"
NAMESPACE = "entrabot"
FULLNAME = "entrabot-fleet"  # the release name contains the chart name, so Helm keeps it as is

CLIENT_ID = "0b9c5e4f-7a7e-4d56-9c3a-5d0c8f1e2a3b"
TENANT_ID = "72f988bf-86f1-41af-91ab-2d7cd011db47"

# Authentication on /mcp: the pods listen on all interfaces, where the service refuses to start without it.
# An Entra audience needs its tenant and the app role a client must hold (service/from_settings/mcp.py check_auth_config).
MCP_AUTH = {
    "config": {
        "mcpJwtAudience": "api://entrabot-fleet",
        "tenantId": TENANT_ID,
        "mcpJwtRequiredRoles": "Entrabot.Host",
    }
}

# The minimum a multi-replica install needs: the shared Blob ledger and authenticated /mcp.
REQUIRED = {
    "config": {"blobEndpoint": "https://entrabotfleet.blob.core.windows.net", **MCP_AUTH["config"]}
}

# Delegated mode (tenants without Entra Agent ID): a signed-in person's tokens, sealed in the container.
DELEGATED = {
    "config": {
        "authMode": "delegated",
        "delegatedClientId": "d31e9a7e-0000-4d31-8000-0000000d31e9",
    },
    "secrets": {"delegatedTokenKey": "q83vEjRWeJq83vEjRWeJq83vEjRWeJq83vEjRWeJq80="},
}

# Every optional feature on (workload identity for Blob and the blueprint, autoscaling, a
# ServiceMonitor, extra egress, a created Secret, every optional setting).
ALL_FEATURES: dict[str, Any] = {
    "image": {"repository": "myacr.azurecr.io/entrabot-fleet", "digest": "sha256:" + "ab" * 32},
    "imagePullSecrets": [{"name": "acr"}],
    "workloadIdentity": {"enabled": True, "clientId": CLIENT_ID, "tenantId": TENANT_ID},
    "serviceAccount": {"annotations": {"example.com/owner": "agents"}},
    "config": {
        "blobEndpoint": "https://entrabotfleet.blob.core.windows.net",
        "blobContainer": "ledger",
        "blobAuth": "default_credential",
        "tenantId": TENANT_ID,
        "agentIdentityId": "a9e47100-0000-4707-8000-000000a9e471",
        "agentUserId": "e47b0700-0000-4e5e-8000-0000000e47b0",
        "agentUserUpn": "entrabot@contoso.onmicrosoft.com",
        "mcpJwtAudience": "api://entrabot-fleet",
        "mcpJwtRequiredRoles": "Entrabot.Host",
        "mcpJwtAllowedClientIds": "c1e47a99-0000-4c1e-8000-0000000c1e47",
        "mcpAllowedHosts": ["agents.example.com"],
        "mcpAllowedOrigins": ["https://agents.example.com"],
        "mcpPublicBaseUrl": "https://agents.example.com",
        "otlpEndpoint": "http://otel-collector.monitoring:4318",
        "logLevel": "DEBUG",
        "extraEnv": {"ENTRABOT_CHAT_POLL_INTERVAL_S": 5},
    },
    "blueprint": {
        "clientId": "b1de9a14-0000-4f6f-8000-000000b1de9a",
        "credential": "workloadIdentity",
    },
    "secrets": {"mcpStaticTokens": "token-one,token-two"},
    "autoscaling": {"enabled": True, "minReplicas": 3, "maxReplicas": 8},
    "metrics": {
        "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}}
    },
    "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
    "networkPolicy": {
        "extraEgress": [
            {
                "to": [
                    {
                        "namespaceSelector": {
                            "matchLabels": {"kubernetes.io/metadata.name": "monitoring"}
                        }
                    }
                ],
                "ports": [{"port": 4318, "protocol": "TCP"}],
            },
        ]
    },
    "podAnnotations": {"example.com/team": "agents"},
    "podLabels": {"example.com/tier": "backend"},
    "priorityClassName": "high",
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [
        {"key": "dedicated", "operator": "Equal", "value": "agents", "effect": "NoSchedule"}
    ],
}


@dataclass(frozen=True)
class Rendered:
    objects: list[dict[str, Any]]
    notes: str

    def one(self, kind: str, api_version: str | None = None) -> dict[str, Any]:
        found = self.all(kind, api_version)
        assert len(found) == 1, f"expected one {kind}, got {len(found)}"
        return found[0]

    def all(self, kind: str, api_version: str | None = None) -> list[dict[str, Any]]:
        return [
            o for o in self.objects if o["kind"] == kind and api_version in (None, o["apiVersion"])
        ]

    def env(self) -> dict[str, str]:
        """The environment of the service container: ConfigMap data, created-Secret keys, explicit env."""
        container = self.one("Deployment")["spec"]["template"]["spec"]["containers"][0]
        names: dict[str, str] = {
            e["name"]: e.get("value", "<from field>") for e in container.get("env", [])
        }
        for source in container.get("envFrom", []):
            if "configMapRef" in source:
                names.update(self.data("ConfigMap", source["configMapRef"]["name"]))
            if "secretRef" in source:
                names.update(self.data("Secret", source["secretRef"]["name"]))
        return names

    def data(self, kind: str, name: str) -> dict[str, str]:
        matching = [o for o in self.all(kind) if o["metadata"]["name"] == name]
        return matching[0].get("data", {}) if matching else {}


@functools.cache
def chart() -> helm_python.Chart:
    # Helm prints an INFO line for the dashboards/ symlink on every load; it is expected.
    return helm_python.Chart.load(CHART_DIR)


def render(values: dict[str, Any]) -> Rendered:
    manifests = chart().render(values, name=RELEASE, namespace=NAMESPACE)
    objects = [
        doc
        for path, text in sorted(manifests.items())
        if path.endswith(".yaml")
        for doc in yaml.safe_load_all(text)
        if doc
    ]
    notes = next((text for path, text in manifests.items() if path.endswith("NOTES.txt")), "")
    return Rendered(objects, notes)


def merge(*layers: dict[str, Any]) -> dict[str, Any]:
    """Deep-merges value layers (later wins), as repeated `-f values.yaml` would."""
    result: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, dict) and isinstance(result.get(key), dict):
                result[key] = merge(result[key], value)
            else:
                result[key] = value
    return result

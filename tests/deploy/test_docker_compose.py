"""docker-compose.yml: a valid Compose file whose commands, settings, seed and scrape targets all
exist, with three hardened replicas sharing one Azurite container and the demo tenant."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from typing import Any

import pytest
import yaml
from compose_spec import PyCompose

from emulator.seed import demo_seed_path, load_seed
from service.devstack.dev_environment import DevstackSettings
from tests.deploy.deploy_facts import (
    COMPOSE_FILE,
    DASHBOARD,
    DATA_DIR,
    PROMETHEUS_CONFIG,
    REPO_ROOT,
    assert_is_cli_command,
    load_compose_file,
    unknown_settings,
)

SERVICE_IMAGE = "entrabot-fleet:local"
REPLICAS = ("replica-1", "replica-2", "replica-3")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_compose_file()


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def test_compose_file_is_a_valid_compose_specification(compose: dict[str, Any]) -> None:
    # compose-spec's parser refuses unknown keys, bad types, ports and durations; validate() checks
    # that every network, volume, config and secret a service uses is declared.
    parsed = PyCompose.from_json(json.dumps(compose))
    parsed.validate()
    assert sorted(parsed.service_names()) == sorted(compose["services"])


@pytest.mark.skipif(
    shutil.which("docker-compose") is None, reason="Debian's docker-compose is not installed"
)
def test_docker_compose_accepts_the_file() -> None:
    result = subprocess.run(
        ["docker-compose", "-f", str(COMPOSE_FILE), "config", "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, result.stderr


def test_every_published_port_is_on_loopback_and_moved_by_its_services_variable() -> None:
    raw = yaml.safe_load(COMPOSE_FILE.read_text())  # before interpolation
    published = 0
    for name, service in raw["services"].items():
        variable = f"FLEET_{name.upper().replace('-', '_')}_PORT"
        for port in service.get("ports", []):
            assert re.fullmatch(rf"127\.0\.0\.1:\$\{{{variable}:-\d+\}}:\d+", port), (
                f"{name} publishes {port!r}: want 127.0.0.1:${{{variable}:-<default>}}:<container port>"
            )
            published += 1
    assert (
        published == len(REPLICAS) + 4
    )  # each replica, Azurite, the emulator, Prometheus, Grafana


def test_every_dependency_names_a_defined_service(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        for dependency in service.get("depends_on", []):
            assert dependency in services, f"{name} depends on undefined service {dependency}"


def test_every_entrabot_variable_compose_sets_is_a_setting(
    services: dict[str, dict[str, Any]],
) -> None:
    names = {key for service in services.values() for key in (service.get("environment") or {})}
    assert {n for n in names if n.startswith("ENTRABOT_")}, (
        "the replicas are configured through ENTRABOT_*"
    )
    assert unknown_settings(names) == []


def test_service_commands_are_entrabot_fleet_command_lines(
    services: dict[str, dict[str, Any]], cli_parser
) -> None:
    ours = {
        name: s
        for name, s in services.items()
        if s.get("image") == SERVICE_IMAGE and "entrypoint" not in s
    }
    assert set(REPLICAS) | {"emulator"} <= set(ours)
    for service in ours.values():
        # The replicas run the image's CMD (serve); the emulator overrides it.
        assert_is_cli_command(cli_parser, service.get("command", ["serve"]))


def test_emulator_serves_the_demo_seed_shipped_in_the_image(
    services: dict[str, dict[str, Any]],
) -> None:
    command = services["emulator"]["command"]
    seed_in_image = command[command.index("--seed") + 1]
    # The Dockerfile copies emulator/seeds/*.json to /app/seeds/.
    assert seed_in_image == f"/app/seeds/{demo_seed_path().name}"
    assert demo_seed_path().is_file()


def test_replicas_wait_for_a_healthy_emulator_on_the_port_it_serves(
    services: dict[str, dict[str, Any]],
) -> None:
    emulator = services["emulator"]
    port = emulator["command"][emulator["command"].index("--port") + 1]
    assert f"http://127.0.0.1:{port}/_emulator/health" in emulator["healthcheck"]["test"][-1]
    for replica in REPLICAS:
        env = services[replica]["environment"]
        assert env["ENTRABOT_GRAPH_URL"] == f"http://emulator:{port}/v1.0"
        assert env["ENTRABOT_AUTHORITY"] == f"http://emulator:{port}"
        assert services[replica]["depends_on"]["emulator"]["condition"] == "service_healthy"


def test_replicas_use_the_demo_tenant_of_the_seed(services: dict[str, dict[str, Any]]) -> None:
    seed = load_seed(demo_seed_path())
    expected = {
        "ENTRABOT_TENANT_ID": seed.tenant_id,
        "ENTRABOT_BLUEPRINT_CLIENT_ID": seed.blueprint.app_id,
        "ENTRABOT_AGENT_IDENTITY_ID": seed.agent_identity.id,
        "ENTRABOT_AGENT_USER_ID": seed.agent_user.id,
        "ENTRABOT_AGENT_USER_UPN": seed.agent_user.user_principal_name,
    }
    for replica in REPLICAS:
        env = services[replica]["environment"]
        assert {k: env[k] for k in expected} == expected
        assert env["ENTRABOT_BLUEPRINT_CLIENT_SECRET"] in seed.blueprint.client_secrets


def test_replicas_share_one_container_under_distinct_replica_ids(
    services: dict[str, dict[str, Any]],
) -> None:
    envs = [services[r]["environment"] for r in REPLICAS]
    assert len({(e["ENTRABOT_BLOB_ENDPOINT"], e["ENTRABOT_BLOB_CONTAINER"]) for e in envs}) == 1
    assert [e["ENTRABOT_REPLICA_ID"] for e in envs] == list(REPLICAS)
    init_env = services["azurite-init"]["environment"]
    assert init_env["ENTRABOT_BLOB_CONTAINER"] == envs[0]["ENTRABOT_BLOB_CONTAINER"]
    assert init_env["ENTRABOT_BLOB_CONNECTION_STRING"] == envs[0]["ENTRABOT_BLOB_CONNECTION_STRING"]
    for replica in REPLICAS:
        assert (
            services[replica]["depends_on"]["azurite-init"]["condition"]
            == "service_completed_successfully"
        )
        # Directly too: Compose stops a service after its running dependents, and azurite-init has exited.
        assert services[replica]["depends_on"]["azurite"]["condition"] == "service_started"


def test_replicas_run_read_only_with_writable_tmp_and_data_dir_and_no_capabilities(
    services: dict[str, dict[str, Any]],
) -> None:
    for name in (*REPLICAS, "emulator"):
        service = services[name]
        assert service["read_only"] is True
        assert set(service["tmpfs"]) == {"/tmp", DATA_DIR}
        assert service["cap_drop"] == ["ALL"]
        assert "no-new-privileges:true" in service["security_opt"]
    for replica in REPLICAS:
        assert services[replica]["stop_grace_period"] == "30s"


def test_azurite_image_is_the_pinned_npm_release_with_the_flags_the_sdk_needs(
    services: dict[str, dict[str, Any]],
) -> None:
    pinned = json.loads((REPO_ROOT / "azurite" / "package.json").read_text())["dependencies"][
        "azurite"
    ]
    azurite = services["azurite"]
    assert azurite["image"] == f"mcr.microsoft.com/azure-storage/azurite:{pinned}"
    # What ENTRABOT_AZURITE=testcontainers runs unless told otherwise: the same release.
    assert DevstackSettings.model_fields["azurite_image"].default == azurite["image"]
    flags = azurite["command"]
    for flag in ("--skipApiVersionCheck", "--loose", "--disableTelemetry"):
        assert flag in flags
    assert flags[flags.index("--blobHost") + 1] == "0.0.0.0"


def test_prometheus_scrapes_every_replica_by_name(services: dict[str, dict[str, Any]]) -> None:
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    targets = [
        t for job in config["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]
    ]
    assert sorted(targets) == sorted(f"{r}:8080" for r in REPLICAS)
    mounts = services["prometheus"]["volumes"]
    assert (
        f"./{PROMETHEUS_CONFIG.relative_to(REPO_ROOT)}:/etc/prometheus/prometheus.yml:ro" in mounts
    )


def test_grafana_mounts_the_dashboard_and_its_provisioning(
    services: dict[str, dict[str, Any]],
) -> None:
    for mount in services["grafana"]["volumes"]:
        source = mount.split(":")[0]
        assert (REPO_ROOT / source).exists(), f"{source} is mounted but missing"
    dashboard_mount = (
        f"./{DASHBOARD.relative_to(REPO_ROOT)}:/var/lib/grafana/dashboards/{DASHBOARD.name}:ro"
    )
    assert dashboard_mount in services["grafana"]["volumes"]
    provider = yaml.safe_load(
        (REPO_ROOT / "deploy/grafana/provisioning/dashboards/entrabot-fleet.yml").read_text()
    )
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    datasource = yaml.safe_load(
        (REPO_ROOT / "deploy/grafana/provisioning/datasources/prometheus.yml").read_text()
    )
    dashboard = json.loads(DASHBOARD.read_text())
    default_source = next(v for v in dashboard["templating"]["list"] if v["type"] == "datasource")[
        "current"
    ]["value"]
    assert datasource["datasources"][0]["uid"] == default_source

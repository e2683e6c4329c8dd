"""The Dockerfile builds an image that runs the service as a fixed non-root user on a read-only root
filesystem, answers /healthz against Azurite, passes its own HEALTHCHECK and exits cleanly on SIGTERM.

Needs a Docker engine: Debian's dockerd is started here on a private socket (root and
deploy/docker/ci-setup.sh needed); without one the tests skip and say why.
"""

from __future__ import annotations

import time
import uuid

import docker
import httpx
import pytest
from azure.storage.blob import BlobServiceClient

from emulator.seed import demo_seed_path, load_seed
from service.devstack.azurite import Azurite
from service.devstack.fleet import free_port
from tests.deploy.deploy_facts import DATA_DIR
from tests.deploy.docker_engine import Engine

# xdist_group: every test that starts the private Docker engine runs on one pytest worker (one engine).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900), pytest.mark.xdist_group("docker")]

APP_UID = 10001
READY_WITHIN_S = 90.0
NANOSECONDS = 1_000_000_000


def test_image_runs_as_fixed_non_root_user_and_ships_no_build_tools(
    engine: Engine, fleet_image: str
) -> None:
    config = engine.client.images.get(fleet_image).attrs["Config"]
    assert config["User"] == f"{APP_UID}:{APP_UID}"
    assert config["Entrypoint"] == ["entrabot-fleet"]
    assert config["Cmd"] == ["serve"]
    probe = (
        "id -u; "
        "for tool in gcc cc make pip pip3; do command -v $tool >/dev/null && echo found:$tool; done; "
        "/opt/venv/bin/python -c 'import pip' 2>/dev/null && echo found:pip-module; "
        "test -e /src && echo found:/src; "
        "ls /app/seeds"
    )
    output = engine.client.containers.run(
        fleet_image,
        entrypoint=["/bin/sh", "-c"],
        command=[probe],
        remove=True,
        network_mode="none",
    ).decode()
    lines = output.split()
    assert lines[0] == str(APP_UID)
    assert [line for line in lines if line.startswith("found:")] == []
    assert "demo.json" in lines, (
        "the emulator's demo seed must be at /app/seeds/demo.json (docker-compose.yml)"
    )


def test_container_serves_healthz_on_read_only_root_and_stops_cleanly_on_sigterm(
    engine: Engine, fleet_image: str, azurite: Azurite
) -> None:
    seed = load_seed(demo_seed_path())
    blob_container = f"imagetest{uuid.uuid4().hex[:12]}"
    BlobServiceClient.from_connection_string(azurite.connection_string).create_container(
        blob_container
    )
    graph_port, port = free_port(), free_port()
    # The Graph emulator from the same image, as docker-compose.yml runs it.
    emulator = engine.client.containers.run(
        fleet_image,
        detach=True,
        network_mode="host",
        read_only=True,
        tmpfs={"/tmp": ""},
        entrypoint=["python", "-m", "emulator"],
        command=[
            "--seed",
            f"/app/seeds/{demo_seed_path().name}",
            "--host",
            "127.0.0.1",
            "--port",
            str(graph_port),
        ],
        healthcheck={"test": ["NONE"]},
    )
    replica = None
    try:
        _wait_for_http(f"http://127.0.0.1:{graph_port}/_emulator/health", emulator)
        replica = engine.client.containers.run(
            fleet_image,
            detach=True,
            network_mode="host",
            read_only=True,
            tmpfs={"/tmp": "", DATA_DIR: ""},
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            environment={
                "ENTRABOT_PORT": str(port),
                "ENTRABOT_REPLICA_ID": "image-test",
                "ENTRABOT_BLOB_ENDPOINT": azurite.blob_endpoint,
                "ENTRABOT_BLOB_CONTAINER": blob_container,
                "ENTRABOT_BLOB_AUTH": "connection_string",
                "ENTRABOT_BLOB_CONNECTION_STRING": azurite.connection_string,
                "ENTRABOT_AUTHORITY": f"http://127.0.0.1:{graph_port}",
                "ENTRABOT_GRAPH_URL": f"http://127.0.0.1:{graph_port}/v1.0",
                "ENTRABOT_TENANT_ID": seed.tenant_id,
                "ENTRABOT_BLUEPRINT_CLIENT_ID": seed.blueprint.app_id,
                "ENTRABOT_BLUEPRINT_CLIENT_SECRET": seed.blueprint.client_secrets[0],
                "ENTRABOT_AGENT_IDENTITY_ID": seed.agent_identity.id,
                "ENTRABOT_AGENT_USER_ID": seed.agent_user.id,
                "ENTRABOT_AGENT_USER_UPN": seed.agent_user.user_principal_name,
                "ENTRABOT_MCP_STATIC_TOKENS": "image-test-token",
            },
            # The image's own HEALTHCHECK command (an empty test inherits it), checked every second.
            healthcheck={
                "test": [],
                "interval": NANOSECONDS,
                "timeout": 3 * NANOSECONDS,
                "retries": 3,
                "start_period": 60 * NANOSECONDS,
            },
        )
        _wait_for_http(f"http://127.0.0.1:{port}/healthz", replica)
        _wait_for_http(f"http://127.0.0.1:{port}/readyz", replica)
        assert _docker_health(replica) == "healthy", _logs(replica)
        replica.stop(timeout=30)  # SIGTERM, then SIGKILL after 30 s (which would show as 137)
        state = engine.client.api.inspect_container(replica.id)["State"]
        assert (state["ExitCode"], state["OOMKilled"]) == (0, False), _logs(replica)
    finally:
        for container in (replica, emulator):
            if container is not None:
                container.remove(force=True)


def _wait_for_http(url: str, container: docker.models.containers.Container) -> None:
    """Until ``url`` answers 200; fails early if the container exits. Bounded in time."""
    deadline = time.monotonic() + READY_WITHIN_S
    status: int | str = "no answer"
    while time.monotonic() < deadline:
        container.reload()
        if container.status == "exited":
            pytest.fail(f"the container exited before {url} answered:\n{_logs(container)}")
        try:
            status = httpx.get(url, timeout=2).status_code
        except httpx.TransportError as exc:
            status = type(exc).__name__
        if status == 200:
            return
        time.sleep(0.5)
    pytest.fail(
        f"{url} did not answer 200 within {READY_WITHIN_S:.0f} s (last: {status}):\n{_logs(container)}"
    )


def _docker_health(container: docker.models.containers.Container) -> str:
    """Docker's verdict from the image's HEALTHCHECK, once it has one. Bounded in time."""
    deadline = time.monotonic() + READY_WITHIN_S
    health = "none"
    while time.monotonic() < deadline:
        container.reload()
        health = container.attrs["State"].get("Health", {}).get("Status", "none")
        if health in ("healthy", "unhealthy"):
            return health
        time.sleep(0.5)
    return health


def _logs(container: docker.models.containers.Container) -> str:
    return container.logs(tail=60).decode(errors="replace")

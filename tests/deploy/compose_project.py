"""docker-compose.yml brought up for real on the tests' private engine, as one Compose project.

The project is the repository's file plus an override naming the images built here (no registry is
reachable for Compose to build from python:3.11-slim or pull Azurite's); every published port is a
free loopback port through the file's FLEET_*_PORT variables. ``remove()`` takes everything the
project made away, and then removes by Compose's project label whatever a failed ``down`` left.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import docker
import yaml

from service.devstack.fleet import free_port
from tests.deploy.deploy_facts import COMPOSE_FILE, REPO_ROOT

PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"
COMMAND_TIMEOUT_S = 300
STOP_GRACE_S = 30  # the replicas' stop_grace_period: a replica still running after it is SIGKILLed


class ComposeUnavailable(RuntimeError):
    """Neither Compose implementation is installed; the message says which to install."""


def compose_command() -> list[str]:
    """Debian's docker-compose (deploy/docker/ci-setup.sh installs it), else the compose plugin."""
    standalone = shutil.which("docker-compose")
    if standalone is not None:
        return [standalone]
    cli = shutil.which("docker")
    if (
        cli is not None
        and subprocess.run([cli, "compose", "version"], capture_output=True, timeout=60).returncode
        == 0
    ):
        return [cli, "compose"]
    raise ComposeUnavailable(
        "neither Debian's docker-compose nor the docker compose plugin is installed: "
        "run deploy/docker/ci-setup.sh"
    )


@dataclass
class ComposeProject:
    client: docker.DockerClient
    docker_host: str  # the engine's socket URL, for Compose
    images: Mapping[str, str]  # service -> the locally built image it runs instead of the file's
    workdir: Path
    port_variables: Sequence[str]
    name: str = field(default_factory=lambda: f"entrabot-compose-{uuid.uuid4().hex[:8]}")
    ports: dict[str, int] = field(init=False)
    _command: list[str] = field(init=False)
    _override: Path = field(init=False)

    def __post_init__(self) -> None:
        self._command = compose_command()
        self.ports = {variable: free_port() for variable in self.port_variables}
        self._override = self.workdir / "docker-compose.images.yml"
        self._override.write_text(
            yaml.safe_dump(
                {"services": {service: {"image": image} for service, image in self.images.items()}}
            )
        )

    def up(self, services: Sequence[str]) -> None:
        """Create and start ``services`` (Compose waits for each dependency's condition on the way)."""
        self.run("up", "--detach", "--no-build", *services)

    def stop(self) -> None:
        self.run("stop", "--timeout", str(STOP_GRACE_S))

    def down(self) -> None:
        self.run("down", "--volumes", "--remove-orphans", "--timeout", str(STOP_GRACE_S))

    def run(self, *arguments: str) -> str:
        env = {
            **os.environ,
            "DOCKER_HOST": self.docker_host,
            **{k: str(v) for k, v in self.ports.items()},
        }
        result = subprocess.run(
            [
                *self._command,
                "--project-name",
                self.name,
                "--file",
                str(COMPOSE_FILE),
                "--file",
                str(self._override),
                *arguments,
            ],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"`compose {' '.join(arguments)}` failed ({result.returncode}):\n"
                f"{result.stderr[-3000:]}\n{self.logs()}"
            )
        return result.stdout

    def containers(self, service: str | None = None) -> list[docker.models.containers.Container]:
        labels = [f"{PROJECT_LABEL}={self.name}"] + (
            [f"{SERVICE_LABEL}={service}"] if service else []
        )
        found: list[docker.models.containers.Container] = self.client.containers.list(
            all=True, filters={"label": labels}
        )
        return found

    def leftovers(self) -> dict[str, list[str]]:
        """What of this project the engine still has: containers, networks, volumes."""
        label = {"label": f"{PROJECT_LABEL}={self.name}"}
        return {
            "containers": [c.name for c in self.client.containers.list(all=True, filters=label)],
            "networks": [n.name for n in self.client.networks.list(filters=label)],
            "volumes": [v.name for v in self.client.volumes.list(filters=label)],
        }

    def logs(self, tail: int = 40) -> str:
        """The last lines of each container's log, to explain a failure."""
        parts = []
        for container in self.containers():
            text = container.logs(tail=tail).decode(errors="replace")
            parts.append(f"--- {container.name} ({container.status}) ---\n{text}")
        return "\n".join(parts)

    def remove(self) -> None:
        """``down``, then by label whatever it left (a failed command must not leave the engine dirty)."""
        try:
            self.down()
        except (RuntimeError, subprocess.TimeoutExpired):
            pass
        label = {"label": f"{PROJECT_LABEL}={self.name}"}
        for container in self.client.containers.list(all=True, filters=label):
            container.remove(force=True, v=True)
        for network in self.client.networks.list(filters=label):
            network.remove()
        for volume in self.client.volumes.list(filters=label):
            volume.remove(force=True)

"""A Docker engine for the image tests: Debian's dockerd on a private socket, started and stopped here.

The private socket (not /var/run/docker.sock) keeps this engine, its data root and what the tests
leave in it apart from any system daemon; a test hands it to another client as ``unix://{SOCKET}``
(docker-compose, testcontainers through DOCKER_HOST).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import docker

from service.devstack.processes import terminate

RUN_DIR = Path(os.environ.get("ENTRABOT_TEST_DOCKER_RUN_DIR", "/run/entrabot-fleet-docker"))
# Kept between runs on purpose: the imported base image and the layer cache make the next build quick.
DATA_ROOT = Path(os.environ.get("ENTRABOT_TEST_DOCKER_DATA_ROOT", "/var/lib/entrabot-fleet-docker"))
SOCKET = RUN_DIR / "docker.sock"
START_TIMEOUT_S = 60.0


class EngineUnavailable(RuntimeError):
    """No Docker engine can run here; the message says why (the tests skip with it)."""


@dataclass
class Engine:
    client: docker.DockerClient
    started_here: bool
    _stop: Callable[[], None] | None = field(default=None, repr=False)

    def stop(self) -> None:
        self.client.close()
        if self._stop is not None:
            self._stop()
            self._stop = None


def start_engine() -> Engine:
    """Reuse the private engine if it answers, else start dockerd (root and docker.io needed)."""
    existing = _ping()
    if existing is not None:
        return Engine(existing, started_here=False)
    if os.geteuid() != 0:
        raise EngineUnavailable("dockerd needs root, and these tests do not run as root")
    dockerd = shutil.which("dockerd")
    if dockerd is None:
        raise EngineUnavailable(
            "dockerd is not installed: run deploy/docker/ci-setup.sh (Debian's docker.io)"
        )
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    DATA_ROOT.mkdir(parents=True, exist_ok=True)
    log_path = RUN_DIR / "dockerd.log"
    with log_path.open("wb") as log:
        # No bridge and no iptables: builds and containers use the host's network, which is all
        # this machine allows (and needs no NAT rules).
        proc = subprocess.Popen(
            [
                dockerd,
                "--host",
                f"unix://{SOCKET}",
                "--data-root",
                str(DATA_ROOT),
                "--exec-root",
                str(RUN_DIR / "exec"),
                "--pidfile",
                str(RUN_DIR / "dockerd.pid"),
                "--storage-driver=overlay2",
                "--iptables=false",
                "--ip6tables=false",
                "--bridge=none",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise EngineUnavailable(f"dockerd exited with {proc.returncode}: {_tail(log_path)}")
        client = _ping()
        if client is not None:
            return Engine(client, started_here=True, _stop=lambda: _terminate(proc))
        time.sleep(0.5)
    _terminate(proc)
    raise EngineUnavailable(
        f"dockerd did not answer within {START_TIMEOUT_S:.0f} s: {_tail(log_path)}"
    )


def _ping() -> docker.DockerClient | None:
    if not SOCKET.exists():
        return None
    # The client asks the daemon for its API version as it is built, so a stale socket (a daemon
    # that died without removing it) raises here, not only in ping().
    try:
        client = docker.DockerClient(base_url=f"unix://{SOCKET}", timeout=600)
    except Exception:  # noqa: BLE001 - a stale socket or a daemon still starting: not ready yet
        return None
    try:
        client.ping()
        return client
    except Exception:  # noqa: BLE001 - as above
        client.close()
        return None


def _terminate(proc: subprocess.Popen[bytes]) -> None:
    terminate(proc, timeout=30)


def _tail(log_path: Path, lines: int = 15) -> str:
    try:
        return " | ".join(log_path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"

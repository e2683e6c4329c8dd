"""A local fleet: Azurite, the Graph emulator and N replica processes sharing one Blob container.

The replicas are real ``entrabot-fleet serve`` processes configured only through the environment, as
in Kubernetes: the one this harness gives each (``replica_environment`` and its settings), in the
fleet's work directory, so neither this process's ENTRABOT_* names nor a ``.env`` where it was
started reach them. The emulator runs in this process (its statistics and state stay at hand); Azurite is
the pinned npm build (or a container where Docker answers).
"""

from __future__ import annotations

import ctypes
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from emulator.seed import Seed
from emulator.server import RunningEmulator, start_emulator
from service.devstack.azurite import Azurite, start_azurite
from service.devstack.dev_environment import replica_environment
from service.devstack.emulator_env import agent_user_env
from service.devstack.processes import terminate, wait_until_answering

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
DEV_TOKEN = "local-fleet-dev-token"
PR_SET_PDEATHSIG = 1


def _terminate_with_parent() -> None:
    """In the child before exec: SIGTERM it when the process that started it dies, so a demo or test
    killed hard never leaves replicas behind (Linux prctl; elsewhere nothing happens)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ReplicaProcess:
    name: str
    port: int
    env: dict[str, str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def mcp_url(self) -> str:
        return f"{self.base_url}/mcp"

    def start(self) -> None:
        # In the fleet's work directory, beside its log: a .env where the caller runs would be read by
        # the replica's settings and quietly add to the environment it was given.
        with open(self.log_path, "ab") as log_file:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "service.cli", "serve"],
                env=self.env,
                cwd=self.log_path.parent,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_terminate_with_parent,
            )

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def terminate(self, timeout: float = STOP_TIMEOUT_S) -> float:
        """SIGTERM and wait; returns how long the exit took (killed after ``timeout``)."""
        if not self.alive:
            return 0.0
        assert self.proc is not None
        return terminate(self.proc, timeout)

    def kill(self) -> None:
        if self.alive:
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait()

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        if self.proc is None:
            raise RuntimeError(f"{self.name} was never started")
        wait_until_answering(
            f"{self.base_url}/readyz",
            self.proc,
            what=self.name,
            timeout=timeout,
            log_tail=self.log_tail,
        )

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"


@dataclass
class LocalFleet:
    seed: Seed
    workdir: Path
    replicas: int = 3
    # Extra ENTRABOT_* settings for every replica (poll intervals, faults proxy endpoint…); "{port}" in a
    # value becomes the replica's own port.
    extra_env: dict[str, str] = field(default_factory=dict)
    container: str = field(default_factory=lambda: "fleet" + uuid.uuid4().hex[:12])
    azurite: Azurite | None = None
    emulator: RunningEmulator | None = None
    # The fleet tests and benchmarks were measured against the emulator's exact waits; a fleet that should
    # see Graph's whole-second Retry-After turns this off (it applies to the emulator started here).
    fractional_retry_after: bool = True
    members: list[ReplicaProcess] = field(default_factory=list)
    _owns_azurite: bool = False

    def start(self, *, ready_timeout_s: float = READY_TIMEOUT_S) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.azurite is None:
            self.azurite = start_azurite(location=None)
            self._owns_azurite = True
        if self.emulator is None:
            self.emulator = start_emulator(
                self.seed, fractional_retry_after=self.fractional_retry_after
            )
        self.ensure_container()
        self.members = [self._replica(i) for i in range(self.replicas)]
        for member in self.members:
            member.start()
        for member in self.members:
            member.wait_ready(ready_timeout_s)

    def blob_endpoint(self) -> str:
        assert self.azurite is not None
        return self.extra_env.get("ENTRABOT_BLOB_ENDPOINT", self.azurite.blob_endpoint)

    def _replica(self, index: int) -> ReplicaProcess:
        assert self.azurite is not None and self.emulator is not None
        name = f"replica-{index + 1}"
        endpoint = self.blob_endpoint()
        port = free_port()
        env = replica_environment()
        env.update(agent_user_env(self.seed, base_url=self.emulator.base_url))
        connection = self.azurite.connection_string.replace(self.azurite.blob_endpoint, endpoint)
        env.update(
            {
                "ENTRABOT_BLOB_ENDPOINT": endpoint,
                "ENTRABOT_BLOB_CONTAINER": self.container,
                "ENTRABOT_BLOB_CONNECTION_STRING": connection,
                "ENTRABOT_DATA_DIR": str(self.workdir / name),
                "ENTRABOT_HOST": "127.0.0.1",
                "ENTRABOT_PORT": str(port),
                "ENTRABOT_REPLICA_ID": name,
                "ENTRABOT_MCP_STATIC_TOKENS": DEV_TOKEN,
                "ENTRABOT_LOG_LEVEL": "INFO",
                "PYTHONUNBUFFERED": "1",
            }
        )
        # "{port}" in a value is this replica's own port (e.g. a notification URL pointing at itself).
        env.update({k: v.replace("{port}", str(port)) for k, v in self.extra_env.items()})
        return ReplicaProcess(name, port, env, self.workdir / f"{name}.log")

    def ensure_container(self) -> None:
        from azure.storage.blob import BlobServiceClient

        assert self.azurite is not None
        client = BlobServiceClient.from_connection_string(self.azurite.connection_string)
        try:
            client.create_container(self.container)
        except Exception as exc:  # noqa: BLE001 - "already exists" is fine, anything else is reported
            if "ContainerAlreadyExists" not in str(exc):
                raise
        finally:
            client.close()

    def stop(self) -> dict[str, float]:
        """SIGTERM every replica (in parallel) and return how long each took to exit."""
        took: dict[str, float] = {}
        pending = [m for m in self.members if m.alive]
        began = time.monotonic()
        for member in pending:
            assert member.proc is not None
            member.proc.send_signal(signal.SIGTERM)
        # Poll them together, so each reports its own exit time from the common signal.
        while pending and time.monotonic() - began < STOP_TIMEOUT_S:
            for member in [m for m in pending if not m.alive]:
                took[member.name] = time.monotonic() - began
                pending.remove(member)
            time.sleep(0.02)
        for member in pending:
            member.kill()
            took[member.name] = time.monotonic() - began
        if self.emulator is not None:
            self.emulator.stop()
        if self._owns_azurite and self.azurite is not None:
            self.azurite.stop()
        return took

"""Start Azurite's blob service: a container where a Docker engine answers, else the pinned npm build.

Shared by the tests, the local demo and the benchmarks, so all three run on the same Blob semantics.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from service.devstack.dev_environment import DevstackSettings, load_devstack_settings
from service.devstack.processes import terminate

ACCOUNT = "devstoreaccount1"
# Azurite's published development key; not a secret.
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
_LISTEN = re.compile(r"listen(?:s|ing)? on (https?://[\d.]+):(\d+)", re.IGNORECASE)


class AzuriteError(RuntimeError):
    """Azurite could not be started; the message says what to install or fix."""


@dataclass
class Azurite:
    """A running Azurite blob service."""

    blob_endpoint: str  # e.g. http://127.0.0.1:10000/devstoreaccount1
    kind: str  # "npm" or "docker"
    _stop: object = field(repr=False, default=None)

    @property
    def connection_string(self) -> str:
        scheme = self.blob_endpoint.split(":", 1)[0]
        return (
            f"DefaultEndpointsProtocol={scheme};AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
            f"BlobEndpoint={self.blob_endpoint};"
        )

    @property
    def port(self) -> int:
        return int(self.blob_endpoint.rsplit(":", 1)[1].split("/", 1)[0])

    def stop(self) -> None:
        if callable(self._stop):
            self._stop()
            self._stop = None


def docker_engine_available() -> bool:
    """True when a Docker engine answers a ping (takes ~10 ms to say no)."""
    try:
        import docker  # shipped with testcontainers

        docker.from_env().ping()
        return True
    except Exception:  # noqa: BLE001 - any failure means "no engine"; we fall back to npm
        return False


@dataclass(frozen=True)
class AzuriteOAuth:
    """Serve HTTPS with this certificate and accept bearer tokens (``--oauth basic``, which needs HTTPS).

    What "basic" checks, read in its source (dist/src/blob/authentication/BlobTokenAuthenticator.js):
    the token decodes as a JWT (the signature is not verified), nbf and exp are present and now lies
    between them, iss starts with https://sts.windows.net/ (or a sovereign cloud's STS), and aud is
    https://storage.azure.com, Storage's app id or the account's blob URL. It checks no scope or role,
    so any token of that shape reaches every container. Azure Storage also verifies the signature
    against the tenant's keys and authorizes the caller by RBAC (Storage Blob Data roles).
    """

    cert: Path
    key: Path


def start_azurite(
    *, prefer_docker: bool = True, port: int = 0, location: Path | None = None, settings: DevstackSettings | None = None,
    oauth: AzuriteOAuth | None = None,
) -> Azurite:
    """Start Azurite and return once it accepts connections (``settings``: the environment's and ``.env``'s).
    With ``oauth``, the npm build only (the container would need the certificate mounted)."""
    settings = settings or load_devstack_settings()
    if oauth is None and prefer_docker and not settings.azurite_no_docker and docker_engine_available():
        return _start_container()
    return _start_npm(settings.azurite_dir, port=port, location=location, oauth=oauth)


def _start_container() -> Azurite:
    from testcontainers.community.azurite import AzuriteContainer

    container = AzuriteContainer()
    container.start()
    host = container.get_container_host_ip()
    port = container.get_exposed_port(10000)
    return Azurite(f"http://{host}:{port}/{ACCOUNT}", "docker", _stop=container.stop)


def _start_npm(npm_dir: Path, *, port: int, location: Path | None, oauth: AzuriteOAuth | None = None) -> Azurite:
    binary = npm_dir / "node_modules" / ".bin" / "azurite-blob"
    node = shutil.which("node")
    if node is None:
        raise AzuriteError("node is not on PATH: install Node.js 20+ to run Azurite without Docker")
    if not binary.exists():
        raise AzuriteError(f"Azurite is not installed: run `npm ci` in {npm_dir} (make setup does it), "
                           "or set ENTRABOT_AZURITE_DIR to where it is installed")
    script = binary.resolve()  # the .bin entry is a symlink to a node script
    args = [
        "--blobHost", "127.0.0.1", "--blobPort", str(port),
        "--skipApiVersionCheck", "--loose", "--disableTelemetry",
    ]
    args += ["--location", str(location)] if location else ["--inMemoryPersistence"]
    if oauth is not None:
        args += ["--cert", str(oauth.cert), "--key", str(oauth.key), "--oauth", "basic"]
    # Spawn node itself (not a shell) so the PID we signal is Azurite's.
    proc = subprocess.Popen(
        [node, str(script), *args], cwd=npm_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
    )
    deadline = time.monotonic() + 30
    lines: list[str] = []
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            if proc.poll() is not None:
                break
            continue
        lines.append(line.rstrip())
        match = _LISTEN.search(line)
        if match:
            # Keep draining stdout so Azurite never blocks on a full pipe.
            threading.Thread(target=proc.stdout.read, daemon=True).start()

            return Azurite(f"{match.group(1)}:{match.group(2)}/{ACCOUNT}", "npm",
                           _stop=lambda: terminate(proc, timeout=10))
    proc.kill()
    raise AzuriteError("Azurite did not start within 30 s; its output was:\n" + "\n".join(lines[-20:]))

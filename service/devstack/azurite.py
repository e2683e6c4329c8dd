"""Start Azurite's blob service: the pinned npm build as a node process, or, with
ENTRABOT_AZURITE=testcontainers, a container of ENTRABOT_AZURITE_IMAGE started through testcontainers.

Shared by the tests, the local demo and the benchmarks, so all three run on the same Blob semantics.
Both kinds run the same command line and listen on 127.0.0.1 only, on a port the kernel picks.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from service.devstack.dev_environment import DevstackSettings, load_devstack_settings
from service.devstack.processes import terminate

ACCOUNT = "devstoreaccount1"
# Azurite's published development key; not a secret.
ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
_LISTEN = re.compile(r"listen(?:s|ing)? on (https?://[\d.]+):(\d+)", re.IGNORECASE)
# Most of it is node loading Azurite's modules before its first line: 9 s on 2 busy cores (load 4.6),
# over 30 s at load 15, where `up` and the demo failed to start at the former 30 s.
START_TIMEOUT_S = 90.0


class AzuriteError(RuntimeError):
    """Azurite could not be started; the message says what to install or fix."""


@dataclass
class Azurite:
    """A running Azurite blob service."""

    blob_endpoint: str  # e.g. http://127.0.0.1:10000/devstoreaccount1
    kind: str  # what started it, "npm" or "testcontainers" (ENTRABOT_AZURITE), or where a caller found it
    _stop: object = field(repr=False, default=None)
    location: Path | None = (
        None  # the npm build's data folder on this host (a container keeps its own)
    )

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
    *,
    port: int = 0,
    location: Path | None = None,
    settings: DevstackSettings | None = None,
    oauth: AzuriteOAuth | None = None,
) -> Azurite:
    """Start Azurite as ENTRABOT_AZURITE says and return once it accepts connections (``settings``:
    the environment's and ``.env``'s). ``port``, ``location`` and ``oauth`` need the npm build: they
    name host paths and ports a container would need mounted and published, so they start it
    whatever the setting."""
    settings = settings or load_devstack_settings()
    if settings.azurite == "testcontainers" and (port, location, oauth) == (0, None, None):
        return _start_container(settings.azurite_image)
    return _start_npm(settings.azurite_dir, port=port, location=location, oauth=oauth)


# Where the containerised Azurite keeps its blobs: the image's own volume, gone with the container.
_CONTAINER_LOCATION = "/data"


def _blob_arguments(*, port: int, location: str) -> list[str]:
    """The flags Azurite needs for the SDK this project pins (TOOLCHAIN: the API version, telemetry).

    Always on disk, never ``--inMemoryPersistence``: the in-memory store makes every write an extent
    of its own, and Azurite's blob GC (at start, then every 10 minutes) deletes the unreferenced ones
    one by one from an indexed Loki collection, each deletion a pass over all of them, on the one
    event loop that serves requests. Measured here (3.37.0): 20,000 overwrites of 50 keys stopped
    Azurite answering for over 120 s at the 10-minute mark, 5,003 blobs written and their container
    deleted for 38 s; a test suite's session Azurites stalled 8-30 s at their 10- and 20-minute GCs
    (CI's two fleet-test timeouts of 2026-12-03 fit such a stall). On disk, writes share a few extent
    files and the same 20,000 overwrites left no stall above 30 ms (``bench/azurite_gc.py``)."""
    return [
        "--blobHost",
        "127.0.0.1",
        "--blobPort",
        str(port),
        "--skipApiVersionCheck",
        "--loose",
        "--disableTelemetry",
        "--location",
        location,
    ]


def _start_container(image: str) -> Azurite:
    """``azurite-blob`` in a container on the host's network: loopback only, as the npm build, with no
    port to publish (an engine without a default bridge, like the tests' private one, has none to
    publish through) and no host address to guess (testcontainers, run inside a container, would
    answer its gateway's). Its Ryuk reaper image is pulled unless TESTCONTAINERS_RYUK_DISABLED=true."""
    # A test extra, needed only on this path.
    from docker.errors import DockerException
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.wait_strategies import LogMessageWaitStrategy

    try:
        container = (
            DockerContainer(image)
            .with_command(["azurite-blob", *_blob_arguments(port=0, location=_CONTAINER_LOCATION)])
            .with_kwargs(network="host")
            .waiting_for(LogMessageWaitStrategy(_LISTEN).with_startup_timeout(int(START_TIMEOUT_S)))
        )
    except DockerException as exc:
        raise AzuriteError(
            f"ENTRABOT_AZURITE=testcontainers, but no Docker engine answers ({exc}): start "
            "one (DOCKER_HOST names its socket), or unset ENTRABOT_AZURITE for the npm build"
        ) from None
    try:
        container.start()
        stdout, stderr = container.get_logs()
    except (DockerException, TimeoutError, RuntimeError) as exc:
        container.stop()
        raise AzuriteError(
            f"Azurite's container ({image}) did not start: {exc}. ENTRABOT_AZURITE_IMAGE names the image; "
            "where no registry is reachable, build azurite/Dockerfile and name that, and set "
            "TESTCONTAINERS_RYUK_DISABLED=true (Ryuk's image is pulled too)"
        ) from None
    match = _LISTEN.search(stdout.decode(errors="replace") + stderr.decode(errors="replace"))
    if match is None:  # the wait above matched this pattern in these logs
        container.stop()
        raise AzuriteError(f"Azurite's container ({image}) logged no address")
    return Azurite(
        f"{match.group(1)}:{match.group(2)}/{ACCOUNT}", "testcontainers", _stop=container.stop
    )


def _start_npm(
    npm_dir: Path, *, port: int, location: Path | None, oauth: AzuriteOAuth | None = None
) -> Azurite:
    binary = npm_dir / "node_modules" / ".bin" / "azurite-blob"
    node = shutil.which("node")
    if node is None:
        raise AzuriteError(
            "node is not on PATH: install Node.js 20+ to run Azurite's npm build, "
            "or set ENTRABOT_AZURITE=testcontainers where a Docker engine runs"
        )
    if not binary.exists():
        raise AzuriteError(
            f"Azurite is not installed: run `npm ci` in {npm_dir} (make setup does it), "
            "or set ENTRABOT_AZURITE_DIR to where it is installed"
        )
    script = binary.resolve()  # the .bin entry is a symlink to a node script
    # No location given: a folder of its own, removed when it stops (see _blob_arguments: not in memory).
    scratch = Path(tempfile.mkdtemp(prefix="entrabot-azurite-")) if location is None else None
    args = _blob_arguments(port=port, location=str(location or scratch))
    if oauth is not None:
        args += ["--cert", str(oauth.cert), "--key", str(oauth.key), "--oauth", "basic"]
    # Spawn node itself (not a shell) so the PID we signal is Azurite's.
    proc = subprocess.Popen(
        [node, str(script), *args],
        cwd=npm_dir,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + START_TIMEOUT_S
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

            def stop() -> None:
                terminate(proc, timeout=10)
                if scratch is not None:
                    shutil.rmtree(scratch, ignore_errors=True)

            return Azurite(
                f"{match.group(1)}:{match.group(2)}/{ACCOUNT}",
                "npm",
                _stop=stop,
                location=location or scratch,
            )
    proc.kill()
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)
    raise AzuriteError(
        f"Azurite did not start within {START_TIMEOUT_S:.0f} s; its output was:\n"
        + "\n".join(lines[-20:])
    )

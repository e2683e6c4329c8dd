"""Running the emulator: in a background thread for tests and benchmarks, or in the foreground."""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import uvicorn
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey

from emulator.app import create_app
from emulator.clock import Clock
from emulator.context import EmulatorContext
from emulator.seed import Seed, load_seed
from emulator.state import TenantState
from emulator.stats import RequestStats

_START_TIMEOUT_S = 15.0


class RunningEmulator:
    """An emulator serving on ``base_url`` from its own thread and event loop until ``stop()``."""

    def __init__(
        self, server: uvicorn.Server, thread: threading.Thread, ctx: EmulatorContext, base_url: str
    ) -> None:
        self._server = server
        self._thread = thread
        self.context = ctx
        self.base_url = base_url

    @property
    def seed(self) -> Seed:
        return self.context.seed

    @property
    def graph_url(self) -> str:
        return self.base_url + "/v1.0"

    @property
    def authority(self) -> str:
        return self.base_url

    @property
    def token_endpoint(self) -> str:
        return f"{self.base_url}/{self.seed.tenant_id}/oauth2/v2.0/token"

    @property
    def admin_url(self) -> str:
        return self.base_url + "/_emulator"

    @property
    def state(self) -> TenantState:
        """The live tenant state; safe to read and inject into from the test thread."""
        return self.context.state

    @property
    def stats(self) -> RequestStats:
        return self.context.stats

    @property
    def clock(self) -> Clock:
        return self.context.clock

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def __enter__(self) -> RunningEmulator:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class ListenError(Exception):
    """The address cannot be listened on; the message names it, why, and what to pass instead."""


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        reason = exc.strerror or type(exc).__name__
        raise ListenError(
            f"cannot listen on {_url(host, port, 'http').removeprefix('http://')} ({reason}); "
            "pass --port with a free port (--port 0 picks one), or --host with an address of this "
            "machine"
        ) from None
    return sock


def _url(host: str, port: int, scheme: str = "http") -> str:
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


def start_emulator(
    seed: Seed | Path | str | dict[str, Any],
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    clock: Clock | None = None,
    signing_key: RSAPrivateKey | None = None,
    throttle_clock: Callable[[], float] | None = None,
    fractional_retry_after: bool = False,
    tls: tuple[Path, Path] | None = None,
) -> RunningEmulator:
    """Serve ``seed`` on ``host:port`` (0: any free port) and return once it answers (see create_app
    for ``clock``, ``signing_key``, ``throttle_clock`` and ``fractional_retry_after``). ``tls``
    (certificate, key PEM files) serves HTTPS, for clients that accept only an https authority
    (azure-identity)."""
    tenant = load_seed(seed)
    sock = _bind(host, port)
    base_url = _url(host, sock.getsockname()[1], "https" if tls else "http")
    app = create_app(
        tenant,
        clock=clock,
        base_url=base_url,
        signing_key=signing_key,
        throttle_clock=throttle_clock,
        fractional_retry_after=fractional_retry_after,
    )
    cert, key = (str(tls[0]), str(tls[1])) if tls else (None, None)
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_keep_alive=30,
        ssl_certfile=cert,
        ssl_keyfile=key,
    )
    server = uvicorn.Server(config)
    # uvicorn.Server.run makes its own event loop, so the emulator's loop is private to this thread.
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="graph-emulator", daemon=True
    )
    thread.start()
    running = RunningEmulator(server, thread, app.state.emulator, base_url)
    deadline = time.monotonic() + _START_TIMEOUT_S
    while time.monotonic() < deadline:
        if not thread.is_alive():
            raise RuntimeError(
                "the emulator's server thread exited during start-up; see the log above"
            )
        if server.started:  # set once the app is loaded and the (pre-bound) socket is served
            return running
        time.sleep(0.005)
    running.stop()
    raise RuntimeError(f"the emulator did not answer on {base_url} within {_START_TIMEOUT_S:.0f} s")


def serve(
    seed_path: Path | str,
    host: str = "127.0.0.1",
    port: int = 8088,
    *,
    public_url: str | None = None,
    fractional_retry_after: bool = False,
) -> None:
    """Serve in the foreground until interrupted. ``public_url`` fixes the issuer and link host; without
    it (or a concrete ``host``) they follow each request's Host header, as behind docker compose."""
    tenant = load_seed(seed_path)
    sock = _bind(host, port)
    actual = sock.getsockname()[1]
    wildcard = host in ("0.0.0.0", "::", "")
    base_url = public_url or (None if wildcard else _url(host, actual))
    app = create_app(tenant, base_url=base_url, fractional_retry_after=fractional_retry_after)
    shown = base_url or _url("127.0.0.1" if host != "::" else "::1", actual)
    print(
        f"Graph emulator for tenant {tenant.tenant_id} listening on {_url(host or '0.0.0.0', actual)}\n"
        f"  ENTRABOT_GRAPH_URL={shown}/v1.0\n  ENTRABOT_AUTHORITY={shown}\n"
        f"  ENTRABOT_TENANT_ID={tenant.tenant_id}",
        file=sys.stdout,
        flush=True,
    )
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="off", timeout_keep_alive=30
    )
    uvicorn.Server(config).run(sockets=[sock])

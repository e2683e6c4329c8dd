"""What the bridge is told: the fleet's URL, how it authenticates, and whether it takes pushes.

Secrets never come from the command line (a process list shows arguments to every local user): the
static token is read from ``ENTRABOT_BRIDGE_TOKEN`` or from the file ``ENTRABOT_BRIDGE_TOKEN_FILE``
names; an Entra token is acquired for ``--entra-audience`` instead.
"""

from __future__ import annotations

import os
import stat
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from service.bridge.backoff import Backoff
from service.bridge.dedupe import DEFAULT_WINDOW
from service.bridge.written_log import default_state_dir, host_identity
from service.mcp.acknowledging import valid_host_id

TOKEN_ENV = "ENTRABOT_BRIDGE_TOKEN"
TOKEN_FILE_ENV = "ENTRABOT_BRIDGE_TOKEN_FILE"
FLEET_URL_ENV = "ENTRABOT_BRIDGE_FLEET_URL"
AUDIENCE_ENV = "ENTRABOT_BRIDGE_ENTRA_AUDIENCE"
AFFINITY_ENV = "ENTRABOT_BRIDGE_AFFINITY_KEY"
HOST_ID_ENV = "ENTRABOT_BRIDGE_HOST_ID"

AFFINITY_HEADER = "X-Entrabot-Affinity"
"""Sent on every request to the fleet, initialize included, so an ingress can hash it to one replica."""


class BridgeConfigError(ValueError):
    """The bridge cannot start with what it was given; the message says what to set."""


@dataclass(frozen=True)
class StaticTokenSource:
    token: str = field(repr=False)
    # Where the token was given (the variable, and the file), so a refusal can name what to fix.
    origin: str = field(default=TOKEN_ENV, compare=False)


@dataclass(frozen=True)
class EntraTokenSource:
    audience: (
        str  # the fleet's app ID URI or client id; the scope asked for is "<audience>/.default"
    )
    origin: str = field(default="--entra-audience", compare=False)

    @property
    def scope(self) -> str:
        return (
            self.audience
            if self.audience.endswith("/.default")
            else f"{self.audience.rstrip('/')}/.default"
        )


CredentialSource = StaticTokenSource | EntraTokenSource


@dataclass(frozen=True)
class BridgeConfig:
    fleet_url: str
    credential: CredentialSource
    affinity_key: str
    push: bool = False
    permission_relay: bool = False
    backoff: Backoff = Backoff()
    dedupe_window: int = DEFAULT_WINDOW
    call_wait_s: float = (
        10.0  # how long a tool call waits for a fleet session before it answers an error
    )
    request_timeout_s: float = 60.0
    keepalive_s: float = 10.0
    state_dir: Path | None = (
        None  # where the host's written-messages file lives (None: in memory only)
    )
    host_id: str = ""  # the host identity naming that file
    acknowledge: bool = (
        True  # with push: name the host to the fleet and acknowledge what reached it
    )


def load_config(
    *,
    fleet_url: str | None,
    entra_audience: str | None,
    affinity_key: str | None,
    push: bool,
    permission_relay: bool,
    environ: Mapping[str, str],
    host_id: str | None = None,
    working_dir: str | None = None,
) -> BridgeConfig:
    """The bridge's configuration from its arguments and environment; ``BridgeConfigError`` says what to fix."""
    url = fleet_url or environ.get(FLEET_URL_ENV, "")
    if not url:
        raise BridgeConfigError(
            f"no fleet URL: pass --fleet-url https://fleet.example/mcp or set {FLEET_URL_ENV}"
        )
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise BridgeConfigError(
            f"--fleet-url {url!r} is not an http(s) URL of the fleet's /mcp endpoint"
        )
    if parts.scheme == "http" and parts.hostname not in ("127.0.0.1", "localhost", "::1"):
        raise BridgeConfigError(
            f"--fleet-url {url!r} is plain http to a remote host: use https (the bearer token would travel in clear)"
        )
    given_host = host_id or environ.get(HOST_ID_ENV) or None
    if given_host is not None and valid_host_id(given_host) != given_host:
        raise BridgeConfigError(
            f"--host-id {given_host!r} is not a host id: use 1-128 letters, digits and . _ : ~ - (starting with a "
            "letter or digit), the same on every start of this host"
        )
    return BridgeConfig(
        fleet_url=url,
        credential=_credential(entra_audience or environ.get(AUDIENCE_ENV) or None, environ),
        affinity_key=affinity_key or environ.get(AFFINITY_ENV) or uuid.uuid4().hex,
        push=push,
        permission_relay=permission_relay,
        state_dir=default_state_dir(environ),
        host_id=host_identity(url, working_dir or os.getcwd(), given_host),
    )


def _credential(audience: str | None, environ: Mapping[str, str]) -> CredentialSource:
    token = environ.get(TOKEN_ENV, "")
    token_file = environ.get(TOKEN_FILE_ENV, "")
    given = [
        name
        for name, value in (
            (TOKEN_ENV, token),
            (TOKEN_FILE_ENV, token_file),
            ("--entra-audience", audience),
        )
        if value
    ]
    if len(given) > 1:
        raise BridgeConfigError(
            f"{' and '.join(given)} are both set: choose one way to authenticate to the fleet"
        )
    if audience:
        return EntraTokenSource(audience, origin=f"--entra-audience {audience}")
    if token_file:
        path = Path(token_file).expanduser()
        return StaticTokenSource(_read_token_file(path), origin=f"{TOKEN_FILE_ENV}={path}")
    if token:
        return StaticTokenSource(token.strip())
    raise BridgeConfigError(
        f"no credential for the fleet: set {TOKEN_ENV} or {TOKEN_FILE_ENV} (a static token), "
        "or pass --entra-audience with an az login, workload or managed identity"
    )


def _read_token_file(path: Path) -> str:
    """The token in ``path``, refused, as ssh refuses a private key, when others may read it.

    The README has always said ``chmod 600``; a token readable by the group or everyone is a token
    any local account can use. Only regular files are checked: a pipe (``<(pass show fleet)``) or a
    device has no such mode to keep.
    """
    try:
        mode = path.stat().st_mode
        token = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise BridgeConfigError(
            f"{TOKEN_FILE_ENV}={path} cannot be read ({exc.strerror}); fix the path"
        ) from None
    if stat.S_ISREG(mode) and mode & 0o077:
        raise BridgeConfigError(
            f"{TOKEN_FILE_ENV}={path} is open to other users (mode {stat.S_IMODE(mode):04o}): "
            f"run chmod 600 {path}"
        )
    if not token:
        raise BridgeConfigError(
            f"{TOKEN_FILE_ENV}={path} is empty; put the fleet's bearer token in it"
        )
    return token

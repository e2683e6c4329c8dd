"""The bridge's pure parts: the dedupe window, the backoff, its configuration, the Entra token cache."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from service.bridge.auth import EntraToken
from service.bridge.backoff import Backoff
from service.bridge.config import (
    TOKEN_ENV,
    TOKEN_FILE_ENV,
    BridgeConfigError,
    EntraTokenSource,
    StaticTokenSource,
    load_config,
)
from service.bridge.dedupe import DedupeWindow

URL = "http://127.0.0.1:8080/mcp"


def _load(environ: dict[str, str], **overrides: Any) -> Any:
    options: dict[str, Any] = {
        "fleet_url": URL,
        "entra_audience": None,
        "affinity_key": None,
        "push": True,
        "permission_relay": False,
    }
    options.update(overrides)
    return load_config(environ=environ, **options)


def test_a_key_is_seen_once_while_in_the_window_and_forgotten_after() -> None:
    window = DedupeWindow(3)
    assert [window.first_sight(k) for k in ("a", "b", "a", "c", "d")] == [
        True,
        True,
        False,
        True,
        True,
    ]
    # "a" was refreshed by its repeat, so "b" is the oldest and went first.
    assert window.first_sight("a") is False
    assert window.first_sight("b") is True
    assert len(window) == 3


def test_backoff_grows_to_its_ceiling_with_jitter_inside_the_bounds() -> None:
    backoff = Backoff(initial_s=0.5, maximum_s=4.0, rng=random.Random(7))
    for attempt, ceiling in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (10, 4.0)]:
        delays = {backoff.delay(attempt) for _ in range(50)}
        assert all(0.5 <= d <= ceiling for d in delays)
        assert attempt == 1 or len(delays) > 1  # jittered, not one fixed value


def test_static_token_comes_from_the_environment_or_a_file(tmp_path: Path) -> None:
    assert _load({TOKEN_ENV: "t0k"}).credential == StaticTokenSource("t0k")
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    token_file.chmod(0o600)
    assert _load({TOKEN_FILE_ENV: str(token_file)}).credential == StaticTokenSource("from-file")
    assert _load({}, entra_audience="api://fleet").credential == EntraTokenSource("api://fleet")
    assert EntraTokenSource("api://fleet").scope == "api://fleet/.default"


@pytest.mark.parametrize(
    ("environ", "overrides", "says"),
    [
        ({}, {}, "no credential"),
        ({TOKEN_ENV: "a", TOKEN_FILE_ENV: "/x"}, {}, "both set"),
        ({TOKEN_ENV: "a"}, {"entra_audience": "api://fleet"}, "both set"),
        ({TOKEN_FILE_ENV: "/nonexistent/token"}, {}, "cannot be read"),
        ({TOKEN_ENV: "a"}, {"fleet_url": None}, "no fleet URL"),
        ({TOKEN_ENV: "a"}, {"fleet_url": "http://fleet.example.com/mcp"}, "use https"),
        ({TOKEN_ENV: "a"}, {"fleet_url": "fleet/mcp"}, "not an http(s) URL"),
    ],
)
def test_bad_configuration_says_what_to_fix(
    environ: dict[str, str], overrides: dict[str, Any], says: str
) -> None:
    with pytest.raises(BridgeConfigError, match=says.replace("(", r"\(").replace(")", r"\)")):
        _load(environ, **overrides)


def test_the_affinity_key_is_stable_for_a_process_and_can_be_set() -> None:
    config = _load({TOKEN_ENV: "a"})
    assert len(config.affinity_key) == 32
    assert _load({TOKEN_ENV: "a"}, affinity_key="host-7").affinity_key == "host-7"


@dataclass
class _Access:
    token: str
    expires_on: int


class _Credential:
    """Stands in for an azure-identity credential (the Entra endpoint cannot be reached from here)."""

    def __init__(self) -> None:
        self.issued = 0
        self.scopes: list[str] = []

    async def get_token(self, *scopes: str, **kwargs: Any) -> _Access:
        self.issued += 1
        self.scopes.extend(scopes)
        return _Access(f"token-{self.issued}", 1000 + 3600)

    async def close(self) -> None:
        return None


async def test_entra_token_is_reused_until_close_to_expiry_then_refreshed() -> None:
    now = [1000.0]
    credential = _Credential()
    tokens = EntraToken(
        credential, "api://fleet/.default", refresh_margin_s=300, clock=lambda: now[0]
    )
    assert await tokens.token() == "token-1"
    now[0] = 1000 + 3600 - 301
    assert await tokens.token() == "token-1"
    now[0] = 1000 + 3600 - 299
    assert await tokens.token() == "token-2"
    assert credential.scopes == ["api://fleet/.default"] * 2


def test_channel_command_without_a_credential_exits_2_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from service.cli import main
    from service.cli.common import EXIT_CONFIG

    for name in (TOKEN_ENV, TOKEN_FILE_ENV, "ENTRABOT_BRIDGE_ENTRA_AUDIENCE"):
        monkeypatch.delenv(name, raising=False)
    assert main(["channel", "--fleet-url", URL]) == EXIT_CONFIG
    captured = capsys.readouterr()
    assert captured.out == ""  # stdout is the protocol's, even for an error
    [line] = captured.err.strip().splitlines()
    assert line.startswith("entrabot-fleet: no credential for the fleet") and TOKEN_ENV in line

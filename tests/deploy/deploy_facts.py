"""What the deployment artifacts must agree with, read from the service's own code and the repo."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

from service.config import Settings

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = REPO_ROOT / "deploy" / "helm" / "entrabot-fleet"
BICEP_DIR = REPO_ROOT / "deploy" / "bicep"
GRAFANA_DIR = REPO_ROOT / "deploy" / "grafana"
DASHBOARD = GRAFANA_DIR / "entrabot-fleet.json"
PROMETHEUS_CONFIG = REPO_ROOT / "deploy" / "prometheus" / "prometheus.yml"
PROMETHEUS_ALERTS = REPO_ROOT / "deploy" / "prometheus" / "alerts.yml"
COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
DOCKERFILE = REPO_ROOT / "Dockerfile"
DATA_DIR = "/var/lib/entrabot/data"  # the image's ENTRABOT_DATA_DIR, a writable volume everywhere
_DEFAULTED_VARIABLE = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*:-([^}$]*)\}")


def settings_env_names() -> frozenset[str]:
    """Every ENTRABOT_* variable the service reads (pydantic-settings: prefix + upper-cased field)."""
    prefix = Settings.model_config["env_prefix"]
    return frozenset(f"{prefix}{name}".upper() for name in Settings.model_fields)


def unknown_settings(names: Iterable[str]) -> list[str]:
    """The ENTRABOT_* names among ``names`` that service/config.py does not read."""
    known = settings_env_names()
    return sorted(n for n in names if str(n).startswith("ENTRABOT_") and n not in known)


def assert_is_cli_command(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """The argument list parses as an `entrabot-fleet` command line: subcommand and flags exist."""
    try:
        args = parser.parse_args(argv)
    except SystemExit:
        pytest.fail(
            f"`entrabot-fleet {' '.join(argv)}` is not a valid command line of service/cli/"
        )
    assert getattr(args, "command", None) == argv[0], (
        f"{argv[0]!r} is not an entrabot-fleet subcommand"
    )


def load_compose_file() -> dict[str, Any]:
    """docker-compose.yml as Compose reads it with none of its variables set: ``${NAME:-default}`` is
    the default. Hand-written: no Python package interpolates Compose files. The file uses only that
    form; any other ``$`` raises here rather than being read wrong."""
    text = _DEFAULTED_VARIABLE.sub(lambda match: match.group(1), COMPOSE_FILE.read_text())
    if "$" in text:
        line = next(line for line in text.splitlines() if "$" in line)
        raise ValueError(
            f"docker-compose.yml uses interpolation other than ${{NAME:-default}}: {line.strip()}"
        )
    parsed: dict[str, Any] = yaml.safe_load(text)
    return parsed

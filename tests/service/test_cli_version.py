"""``entrabot-fleet --version`` names the version pyproject.toml declares (what the image label carries)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import service

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_version_flag_prints_the_project_version_and_exits_zero() -> None:
    declared = tomllib.loads(PYPROJECT.read_text())["project"]["version"]
    result = subprocess.run(
        [sys.executable, "-m", "service.cli", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"entrabot-fleet {declared}"
    assert service.__version__ == declared

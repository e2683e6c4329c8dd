"""A person's commands answer at once: building the parser (``--version``, ``--help``, a usage error)
loads none of the service's heavy libraries. Each command imports what it needs when it runs; the
Azure SDK alone took half a second of every ``entrabot-fleet --version`` when ``service.storage``
re-exported its backends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("azure", "mcp", "uvicorn", "starlette", "pydantic_settings", "httpx", "opentelemetry")
PROBE = """
import json, sys
from service.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


def loaded_by(*argv: str, cwd: Path | None = None) -> set[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ENTRABOT_", "AZURE_"))}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env=env,
    )
    return set(json.loads(result.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("argv", [("--version",), ("--help",), ("serve", "--help"), ("nosuch",)])
def test_the_parser_alone_loads_no_heavy_library(argv: tuple[str, ...]) -> None:
    assert loaded_by(*argv).isdisjoint(HEAVY), sorted(loaded_by(*argv) & set(HEAVY))


def test_the_probe_sees_a_command_that_loads_them(tmp_path: Path) -> None:
    # The same probe on a command that runs (in an empty directory: a local store, an unknown chat):
    # it does load them, so the check above can fail.
    loaded = loaded_by("repair-chat", "19:x@thread.v2", cwd=tmp_path)
    assert "pydantic_settings" in loaded

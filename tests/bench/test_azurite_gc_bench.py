"""bench/azurite_gc.py end to end, in a smoke run that ends before Azurite's GC: both stores start,
take the writes, are watched, and the results say which store each row is and that it ran short.
Its watch ends before the writes do (as a loaded CI machine made a 4 s watch do): each store is still
probed once after its writes, or its row would report a slowest answer nothing measured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench.azurite_gc", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_smoke_run_writes_both_stores_results(tmp_path: Path) -> None:
    done = _bench("--writes", "60", "--watch-s", "0.1", "--results", str(tmp_path))
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "azurite_gc.json").read_text())
    assert result["profile"].startswith("smoke")
    assert [r["store"] for r in result["runs"]] == ["memory", "disk"]
    for run in result["runs"]:
        assert run["writes"] == 60 and run["probes"] >= 1 and run["slowest_answer_s"] < 180
    assert "| memory | 60 |" in (tmp_path / "azurite_gc.md").read_text()


def test_a_bad_argument_is_refused_naming_it(tmp_path: Path) -> None:
    done = _bench("--writes", "0", "--results", str(tmp_path))
    assert done.returncode == 2 and "--writes must be at least 1" in done.stderr
    assert not (tmp_path / "azurite_gc.json").exists()

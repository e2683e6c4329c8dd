"""`make test`'s `-n 2 --dist loadgroup` keeps the tests of one xdist group on one worker: the Docker
tests share one private engine and the images built on it, and each module's tests share one fleet
(tests/conftest.py names a group per module).

Run in a pytest of its own on two small modules of one group, with the plugins this suite runs with:
pytest 9.2 stopped xdist 3.8 from grouping, silently (pytest-dev/pytest-xdist#1386).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

MODULE = """
import pytest

pytestmark = pytest.mark.xdist_group("shared")

@pytest.mark.parametrize("n", range(4))
def test_member(n):
    pass
"""


def test_one_group_runs_on_one_worker(tmp_path: Path) -> None:
    for name in ("test_first.py", "test_second.py"):
        (tmp_path / name).write_text(MODULE)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # not this repository's configuration
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-v",
            "-p",
            "no:cacheprovider",
            "-n",
            "2",
            "--dist",
            "loadgroup",
            str(tmp_path),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    workers = re.findall(r"^\[(gw\d+)\] .* PASSED ", result.stdout, re.MULTILINE)
    assert len(workers) == 8, result.stdout[-3000:]
    assert len(set(workers)) == 1, (
        f"one group, spread over {sorted(set(workers))}:\n{result.stdout[-3000:]}"
    )


REPO_ROOT = Path(__file__).resolve().parents[1]


def test_this_suite_keeps_each_modules_tests_on_one_worker() -> None:
    """The suite's own conftest names a group per module; xdist must see it (it did not, until the hook
    ran first: every module fixture was built once per worker)."""
    modules = ("tests/test_layers.py", "tests/docs/test_documents.py")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-v",
            "-p",
            "no:cacheprovider",
            "-n",
            "2",
            "--dist",
            "loadgroup",
            *modules,
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    ran = re.findall(r"^\[(gw\d+)\] .* PASSED (tests/\S+?)::", result.stdout, re.MULTILINE)
    workers_of = {module: {w for w, m in ran if m == module} for module in modules}
    assert all(len(workers) == 1 for workers in workers_of.values()), workers_of

"""Every benchmark result names the code it measured: figures from an unknown commit cannot be
reproduced or compared."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from bench.report import envelope, machine_line, source_commit


def test_a_result_names_the_commit_whose_code_ran() -> None:
    commit = source_commit()
    assert commit is not None and re.fullmatch(r"[0-9a-f]{7,40}(\+changes)?", commit)
    result = envelope("example", "tiny", {}, [0.0, 0.0, 0.0])
    assert result["commit"] == commit
    assert f"commit `{commit}`" in machine_line(result)


def test_a_change_to_the_code_outside_the_results_is_flagged(tmp_path: Path) -> None:
    """In a copy of the bench package inside a fresh repository: clean, then a results file and a
    document changed (still clean: neither is code), then a code file changed (flagged)."""
    repo = tmp_path / "repo"
    shutil.copytree(
        Path(__file__).resolve().parents[2] / "bench",
        repo / "bench",
        ignore=shutil.ignore_patterns("__pycache__"),
    )

    def git(*args: str) -> None:
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
            cwd=repo,
            check=True,
            capture_output=True,
            timeout=30,
        )

    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "copy")
    probe = [sys.executable, "-c", "from bench.report import source_commit; print(source_commit())"]

    def commit_seen() -> str:
        return subprocess.run(
            probe,
            cwd=repo,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
            env={"PYTHONPATH": str(repo), "PATH": "/usr/bin:/bin"},
        ).stdout.strip()

    clean = commit_seen()
    assert re.fullmatch(r"[0-9a-f]{7,40}", clean)
    (repo / "bench" / "results" / "SUMMARY.md").write_text("re-measured\n")
    (repo / "bench" / "NOTES.md").write_text("a document edited while the benchmark ran\n")
    git("add", "bench/NOTES.md")
    assert commit_seen() == clean
    (repo / "bench" / "report.py").write_text(
        (repo / "bench" / "report.py").read_text() + "\n# edited\n"
    )
    assert commit_seen() == f"{clean}+changes"

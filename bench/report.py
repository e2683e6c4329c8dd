"""Where results go and what every result records: the machine, the date, the load it ran under.

Each benchmark writes ``<name>.json`` (everything measured, with its parameters) and ``<name>.md``
(the short table a reader wants) into one results directory; the runner adds ``SUMMARY.md``.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from datetime import datetime, timezone
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.session import BenchSession

DEFAULT_RESULTS_DIR = Path(__file__).resolve().parent / "results"


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "load_average": load_average(),
    }


def source_commit() -> str | None:
    """The commit whose code ran, ``+changes`` when its code differed from it (documents and
    bench/results aside: figures from uncommitted code are not reproducible); None outside a git checkout."""
    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", *args], cwd=root, capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "--short", "HEAD")
    if commit is None:
        return None
    changes = git(
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
        ".",
        ":(exclude)bench/results",
        ":(exclude)*.md",
    )
    return f"{commit}+changes" if changes else commit


def load_average() -> list[float]:
    """1, 5 and 15 minute load averages: figures taken under a high load are provisional."""
    return [round(x, 2) for x in os.getloadavg()]


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def envelope(
    name: str, profile: str, parameters: dict[str, Any], started_load: list[float]
) -> dict[str, Any]:
    """The fields every result file starts with."""
    return {
        "benchmark": name,
        "when": now_iso(),
        "commit": source_commit(),
        "profile": profile,
        "machine": {**machine(), "load_average_before": started_load},
        "parameters": parameters,
    }


def write_result(
    results_dir: Path, name: str, result: dict[str, Any], markdown: str
) -> tuple[Path, Path]:
    """Write ``<name>.json`` and ``<name>.md`` (each atomically)."""
    results_dir.mkdir(parents=True, exist_ok=True)
    json_path = results_dir / f"{name}.json"
    md_path = results_dir / f"{name}.md"
    write_atomic(json_path, json.dumps(result, indent=2) + "\n")
    write_atomic(md_path, markdown.rstrip() + "\n")
    return json_path, md_path


def write_atomic(path: Path, text: str) -> None:
    """Write through a temporary file and a rename, so a reader never sees half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def markdown_table(headers: list[str], rows: list[list[Any]], align: str | None = None) -> str:
    """A GitHub table; ``align`` is one character per column, "l" or "r" (default: first left, rest right)."""
    align = align or "l" + "r" * (len(headers) - 1)
    rule = ["---" if a == "l" else "---:" for a in align]
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(rule) + " |"]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def percent(share: float | None, digits: int) -> str:
    return "–" if share is None else f"{share * 100:.{digits}f} %"


def machine_line(result: dict[str, Any]) -> str:
    m = result["machine"]
    commit = f"commit `{result['commit']}`, " if result.get("commit") else ""
    return (
        f"{result['when']}, {commit}{m['cpus']} CPUs, Python {m['python']}, load average before "
        f"{'/'.join(str(x) for x in m['load_average_before'])}, after {'/'.join(str(x) for x in m['load_average'])}"
        f" (profile `{result['profile']}`)"
    )


async def at_one_and_three_replicas(
    session: BenchSession,
    name: str,
    at: Callable[[BenchSession, int], Awaitable[dict[str, Any]]],
    targets: dict[str, Any],
) -> dict[str, Any]:
    """A benchmark's runs at 1 and 3 replicas, in its envelope with its targets. The suite's smoke run
    (tiny) takes the 3-replica fleet alone: the one whose hosts go through another replica, and the half
    of the run's time it can spare."""
    started_load = load_average()
    sizes = (3,) if session.profile.name == "tiny" else (1, 3)
    rows = [await at(session, n) for n in sizes]
    result = envelope(name, session.profile.name, {"replicas": list(sizes)}, started_load)
    result.update({"targets": targets, "runs": rows})
    return result

"""Run the benchmarks: ``python -m bench [--quick] [--only NAME ...] [--results DIR]`` (``make bench``).

Each benchmark writes ``<name>.json`` and ``<name>.md`` into the results directory; this runner adds
``SUMMARY.md`` with every table, the command that produced them and the machine's load before and
after (figures taken while other work loads the machine are provisional). One benchmark failing
does not stop the others; the exit status says whether all of them ran.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import json
import shlex
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from bench import (
    bridge_latency,
    change_detection,
    claim_efficiency,
    claude_code_latency,
    conversation_mix,
    delivery_latency,
    footprint,
    graph_cost,
)
from bench.report import load_average, machine, now_iso, source_commit, write_atomic
from bench.session import BenchSession, add_session_arguments, session_from_arguments

# Graph cost and footprint share the single-replica runs, latency and claim efficiency the fleet
# runs: each pair runs back to back so a session reuses what the first one measured.
FLEET_BENCHMARKS: tuple[ModuleType, ...] = (
    graph_cost,
    footprint,
    delivery_latency,
    claim_efficiency,
    bridge_latency,
    change_detection,
    conversation_mix,
    claude_code_latency,
)
CLAIM_LEDGER = "claim_ledger"
NAMES = [m.NAME for m in FLEET_BENCHMARKS] + [CLAIM_LEDGER]
BUSY_LOAD_PER_CPU = (
    0.5  # a 1-minute load above this per CPU before the run: someone else is using the machine
)


@dataclass
class Outcome:
    name: str
    seconds: float
    markdown: str | None = None
    error: str | None = None
    skipped: str | None = None


def run_fleet_benchmark(module: ModuleType, session: BenchSession) -> str:
    result: dict[str, Any] = asyncio.run(module.run(session))
    markdown: str = module.markdown(result)
    session.write(module.NAME, result, markdown)
    return markdown


def run_claim_ledger(session: BenchSession) -> str:
    """The ledger-level benchmark (its own Azurite and processes); its JSON lands next to the others."""
    module = importlib.import_module(f"bench.{CLAIM_LEDGER}")
    module.main([])
    written = Path(module.RESULTS)
    markdown = claim_ledger_markdown(module, json.loads(written.read_text()))
    target = session.results_dir / f"{CLAIM_LEDGER}.json"
    session.results_dir.mkdir(parents=True, exist_ok=True)
    if written.resolve() != target.resolve():
        write_atomic(target, written.read_text())
    write_atomic(session.results_dir / f"{CLAIM_LEDGER}.md", markdown)
    return markdown


def claim_ledger_markdown(module: ModuleType, result: dict[str, Any]) -> str:
    table: Callable[[dict[str, Any]], str] | None = getattr(module, "table", None)
    if table is not None:
        body = table(result)
    else:
        body = "```json\n" + json.dumps(result.get("rows", result), indent=1) + "\n```"
    m = result.get("machine", {})
    return (
        f"## Claim ledger (ledger level, full contention, Azurite)\n\n{body}\n\n"
        f"{result.get('when', '')}, {m.get('cpus')} CPUs, Python {m.get('python')}\n"
    )


def claim_ledger_available() -> bool:
    return importlib.util.find_spec(f"bench.{CLAIM_LEDGER}") is not None


def run_one(name: str, session: BenchSession) -> Outcome:
    began = time.monotonic()
    print(f"== {name} ({session.profile.name}) …", flush=True)
    try:
        if name == CLAIM_LEDGER:
            markdown = run_claim_ledger(session)
        else:
            markdown = run_fleet_benchmark(
                next(m for m in FLEET_BENCHMARKS if m.NAME == name), session
            )
        outcome = Outcome(name, time.monotonic() - began, markdown=markdown)
    except Exception:  # noqa: BLE001 - reported in SUMMARY.md and the exit status; the others still run
        outcome = Outcome(name, time.monotonic() - began, error=traceback.format_exc(limit=8))
        print(outcome.error, file=sys.stderr, flush=True)
    print(
        f"== {name}: {'failed' if outcome.error else 'done'} in {outcome.seconds:.0f} s", flush=True
    )
    return outcome


def selected(args: argparse.Namespace, session: BenchSession) -> list[tuple[str, str | None]]:
    """(name, reason it is skipped or None) in run order."""
    names = args.only or NAMES
    out: list[tuple[str, str | None]] = []
    for name in NAMES:
        if name not in names:
            continue
        reason = None
        if name == CLAIM_LEDGER and not claim_ledger_available():
            reason = "bench/claim_ledger.py is not present"
        elif name == CLAIM_LEDGER and not session.profile.run_claim_ledger and not args.only:
            reason = f"it has no {session.profile.name} size (run it with --only {CLAIM_LEDGER})"
        out.append((name, reason))
    return out


def summary(
    outcomes: list[Outcome],
    command: str,
    session: BenchSession,
    load_before: list[float],
    total_s: float,
) -> str:
    m = machine()
    busy = load_before[0] > BUSY_LOAD_PER_CPU * (m["cpus"] or 1)
    lines = [
        "# Benchmark summary",
        "",
        f"Command: `{command}` (profile `{session.profile.name}`), finished {now_iso()} in {total_s / 60:.1f} min.",
        f"Code: commit `{source_commit()}`." if source_commit() else "Code: not a git checkout.",
        f"Machine: {m['cpus']} CPUs, Python {m['python']}, {m['platform']}.",
        f"Load average (1/5/15 min) before {'/'.join(map(str, load_before))}, "
        f"after {'/'.join(map(str, m['load_average']))}.",
    ]
    if busy:
        lines.append("")
        lines.append(
            "**Provisional:** the machine was already loaded when the run began (other work was "
            "running); latency and CPU figures are pessimistic. Re-run on a quiet machine to quote them."
        )
    for o in outcomes:
        lines.append("")
        if o.skipped:
            lines.append(f"## {o.name}\n\nSkipped: {o.skipped}.")
        elif o.error:
            lines.append(
                f"## {o.name}\n\nFAILED after {o.seconds:.0f} s:\n\n```\n{o.error.strip()}\n```"
            )
        else:
            assert o.markdown is not None
            lines.append(o.markdown.strip())
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    add_session_arguments(parser)
    parser.add_argument(
        "--only",
        action="append",
        choices=NAMES,
        metavar="NAME",
        help=f"run only this benchmark (repeatable): {', '.join(NAMES)}",
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    command = "python -m bench " + " ".join(
        shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv)
    )
    load_before = load_average()
    began = time.monotonic()
    outcomes: list[Outcome] = []
    with session_from_arguments(args) as session:
        if session.keep_workdir:
            print(f"replica logs and data in {session.workdir}", flush=True)
        for name, skipped in selected(args, session):
            outcomes.append(
                Outcome(name, 0.0, skipped=skipped) if skipped else run_one(name, session)
            )
        text = summary(outcomes, command.strip(), session, load_before, time.monotonic() - began)
        session.results_dir.mkdir(parents=True, exist_ok=True)
        write_atomic(session.results_dir / "SUMMARY.md", text)
    print(text)
    return 1 if any(o.error for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())

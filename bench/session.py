"""One benchmark session: the profile, where results go, one Azurite for every fleet, and the scenario
runs already made.

Two pairs of benchmarks read the same runs (latency and claim efficiency read the same fleet
traffic; Graph cost and footprint read the same single-replica load run), so a session runs each
scenario once and hands the result to both; run alone, a benchmark runs its scenario itself.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Coroutine, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from bench.profiles import PROFILES, Profile
from bench.report import DEFAULT_RESULTS_DIR, write_result
from service.devstack.azurite import Azurite, start_azurite

T = TypeVar("T")


@dataclass
class BenchSession:
    profile: Profile
    results_dir: Path = DEFAULT_RESULTS_DIR
    keep_workdir: bool = False
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="entrabot-bench-")))
    _azurite: Azurite | None = None
    _scenarios: dict[Hashable, Any] = field(default_factory=dict)

    async def azurite(self) -> Azurite:
        if self._azurite is None:
            self._azurite = await asyncio.to_thread(start_azurite, location=None)
        return self._azurite

    async def fresh_azurite(self) -> Azurite:
        """A new Azurite for a scenario that must not meet the last one's garbage. Azurite sweeps
        unreferenced blob extents every 10 minutes; after a fleet's container of 10,000+ blobs was
        deleted, a sweep held every request for 30-50 s (seen in the change-detection runs of
        2026-12-02: hint appends timing out, every replica idle). Real Blob storage has no such pause.
        That was the in-memory store; Azurite now keeps its blobs on disk, where the sweep is cheap
        (bench/azurite_gc.py), and a fresh one still starts each scenario with an empty account."""
        if self._azurite is not None:
            self._azurite.stop()
            self._azurite = None
        return await self.azurite()

    async def scenario(self, key: Hashable, run: Callable[[], Awaitable[T]]) -> T:
        """``run()``'s result, computed once per session for the same ``key``."""
        if key not in self._scenarios:
            self._scenarios[key] = await run()
        result: T = self._scenarios[key]
        return result

    def scratch(self, name: str) -> Path:
        """A fresh directory for one fleet's replica logs and data."""
        path = self.workdir / name
        suffix = 1
        while path.exists():
            suffix += 1
            path = self.workdir / f"{name}-{suffix}"
        path.mkdir(parents=True)
        return path

    def write(self, name: str, result: dict[str, Any], markdown: str) -> None:
        json_path, _ = write_result(self.results_dir, name, result, markdown)
        print(f"{name}: wrote {json_path}", flush=True)

    def close(self) -> None:
        if self._azurite is not None:
            self._azurite.stop()
            self._azurite = None
        if not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> BenchSession:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def add_session_arguments(parser: argparse.ArgumentParser) -> None:
    size = parser.add_mutually_exclusive_group()
    size.add_argument(
        "--quick", action="store_true", help="a smoke-sized run (≤ ~3 minutes on 2 cores)"
    )
    size.add_argument(
        "--tiny", action="store_true", help="the smallest run (the test suite's smoke test)"
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=DEFAULT_RESULTS_DIR,
        help=f"where <name>.json and <name>.md go (default {DEFAULT_RESULTS_DIR})",
    )
    parser.add_argument(
        "--keep-logs", action="store_true", help="keep the replicas' logs and data (path printed)"
    )


def session_from_arguments(args: argparse.Namespace) -> BenchSession:
    profile = PROFILES["tiny" if args.tiny else "quick" if args.quick else "full"]
    return BenchSession(profile, results_dir=args.results, keep_workdir=args.keep_logs)


Benchmark = Callable[
    [BenchSession], Coroutine[Any, Any, dict[str, Any]]
]  # asyncio.run takes a coroutine


# Options of one benchmark beyond the session's: added to its parser, then applied to the session
# (e.g. narrowing the profile); ``parser.error`` reports a bad value.
ExtraArguments = Callable[[argparse.ArgumentParser], None]
ApplyArguments = Callable[[argparse.Namespace, BenchSession, argparse.ArgumentParser], None]


def run_standalone(
    name: str,
    run: Benchmark,
    markdown: Callable[[dict[str, Any]], str],
    argv: list[str] | None,
    description: str,
    extra_arguments: ExtraArguments | None = None,
    apply_arguments: ApplyArguments | None = None,
) -> dict[str, Any]:
    """``python -m bench.<name>``: parse the session options, run, write the JSON and markdown."""
    parser = argparse.ArgumentParser(
        prog=f"python -m bench.{name}",
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_session_arguments(parser)
    if extra_arguments is not None:
        extra_arguments(parser)
    args = parser.parse_args(argv)
    with session_from_arguments(args) as session:
        if apply_arguments is not None:
            apply_arguments(args, session, parser)
        if session.keep_workdir:
            print(f"replica logs and data in {session.workdir}", flush=True)
        result: dict[str, Any] = asyncio.run(run(session))
        session.write(name, result, markdown(result))
        print(markdown(result))
    return result

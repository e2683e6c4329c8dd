"""How long Azurite stops answering at its blob GC, with its blobs in memory and on disk:
``python -m bench.azurite_gc`` (about 11 minutes; not part of ``make bench``).

Azurite sweeps unreferenced blob extents at start and then every 10 minutes (``DEFAULT_GC_INTERVAL_MS``
in its dist/src/blob/utils/constants.js, 3.37.0). This writes ``--writes`` overwrites over 50 keys (what a
fleet's cursors and records do), then sends one GET every half second until 11 minutes after the start
and reports the slowest answer and when it came. Both stores run side by side, each its own Azurite.
It is the measurement behind ``service/devstack/azurite.py`` keeping every Azurite on disk.
Results: ``bench/results/azurite_gc.{json,md}``.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.report import (
    DEFAULT_RESULTS_DIR,
    envelope,
    load_average,
    machine_line,
    markdown_table,
    write_result,
)
from service.telemetry.metrics import StorageMetrics
from service.devstack.azurite import ACCOUNT, ACCOUNT_KEY
from service.devstack.dev_environment import load_devstack_settings
from service.devstack.fleet import free_port
from service.devstack.processes import terminate
from service.storage.blob import BlobBackend

NAME = "azurite_gc"
GC_INTERVAL_S = 600.0
WATCH_UNTIL_S = GC_INTERVAL_S + 60.0
PROBE_EVERY_S = 0.5
PROBE_TIMEOUT_S = 180.0  # a stall longer than this is reported as this
KEYS = 50
IN_FLIGHT = 32
START_TIMEOUT_S = 30.0


def _start(store: str, port: int, folder: Path) -> subprocess.Popen[bytes]:
    """Azurite's npm build with either store. Started here rather than through ``start_azurite``, which
    refuses the in-memory store on purpose: this is the one place that wants it, to compare."""
    settings = load_devstack_settings()
    script = (settings.azurite_dir / "node_modules" / ".bin" / "azurite-blob").resolve()
    node = shutil.which("node")
    if node is None or not script.exists():
        raise SystemExit("needs node on PATH and the pinned npm Azurite (make setup)")
    where = ["--location", str(folder)] if store == "disk" else ["--inMemoryPersistence"]
    return subprocess.Popen(
        [
            node,
            str(script),
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            str(port),
            "--skipApiVersionCheck",
            "--loose",
            "--disableTelemetry",
            *where,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


async def _answering(http: httpx.AsyncClient, url: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            await http.get(url)
            return
        except httpx.TransportError:
            await asyncio.sleep(0.2)
    raise SystemExit(f"Azurite did not answer at {url} within {START_TIMEOUT_S:.0f} s")


async def measure(store: str, writes: int, watch_s: float) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix=f"entrabot-bench-azurite-{store}-"))
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}/{ACCOUNT}"
    proc = _start(store, port, folder)
    began = time.monotonic()
    try:
        async with httpx.AsyncClient(timeout=PROBE_TIMEOUT_S) as http:
            probe = f"{endpoint}/absent/absent"
            await _answering(http, probe)
            backend = BlobBackend.from_connection_string(
                f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};BlobEndpoint={endpoint};",
                "gc-bench",
                metrics=StorageMetrics(),
            )
            await backend.ensure_container()
            gate = asyncio.Semaphore(IN_FLIGHT)

            async def write(i: int) -> None:
                async with gate:
                    await backend.write_text(f"chat_cursors/{i % KEYS:02d}.json", f'{{"n": {i}}}')

            await asyncio.gather(*(write(i) for i in range(writes)))
            await backend.aclose()
            filled = time.monotonic() - began
            print(
                f"{store}: {writes} writes took {filled:.0f} s; watching until {watch_s:.0f} s",
                flush=True,
            )
            worst, worst_at, answers = 0.0, 0.0, 0
            # At least one probe after the writes, even when starting and writing outlasted the watch
            # (a loaded machine): a run without one would report a slowest answer it never measured.
            while answers == 0 or time.monotonic() - began < watch_s:
                sent = time.monotonic()
                try:
                    await http.get(probe)
                except httpx.TimeoutException:
                    pass  # counted as the whole timeout below
                took = time.monotonic() - sent
                answers += 1
                if took > worst:
                    worst, worst_at = took, sent - began
                await asyncio.sleep(PROBE_EVERY_S)
    finally:
        terminate(proc, timeout=10)
        shutil.rmtree(folder, ignore_errors=True)
    return {
        "store": store,
        "writes": writes,
        "keys": KEYS,
        "start_and_writes_s": round(filled, 1),
        "probes": answers,
        "slowest_answer_s": round(worst, 3),
        "slowest_at_s": round(worst_at, 1),
        "slowest_is_the_timeout": worst >= PROBE_TIMEOUT_S,
    }


def markdown(result: dict[str, Any]) -> str:
    rows = [
        [
            r["store"],
            r["writes"],
            r["start_and_writes_s"],
            f"{'≥ ' if r['slowest_is_the_timeout'] else ''}{r['slowest_answer_s']}",
            r["slowest_at_s"],
        ]
        for r in result["runs"]
    ]
    return "\n\n".join(
        [
            "# Azurite's blob GC: the slowest answer, in memory and on disk",
            machine_line(result),
            markdown_table(
                [
                    "store",
                    "overwrites",
                    "start + writes (s)",
                    "slowest answer (s)",
                    "at (s from start)",
                ],
                rows,
            ),
            f"One GET every {PROBE_EVERY_S} s until {result['parameters']['watch_until_s']:.0f} s after the start; Azurite's GC runs at "
            f"the start and every {GC_INTERVAL_S:.0f} s. The two stores ran side by side.",
        ]
    )


async def run(writes: int, watch_s: float) -> dict[str, Any]:
    started_load = load_average()
    runs = await asyncio.gather(
        measure("memory", writes, watch_s), measure("disk", writes, watch_s)
    )
    profile = "full" if watch_s > GC_INTERVAL_S else "smoke (ends before the GC)"
    result = envelope(
        NAME,
        profile,
        {"writes": writes, "keys": KEYS, "probe_every_s": PROBE_EVERY_S, "watch_until_s": watch_s},
        started_load,
    )
    result["runs"] = list(runs)
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--writes", type=int, default=20_000, help="overwrites before the watch (default 20,000)"
    )
    parser.add_argument(
        "--results", type=Path, default=DEFAULT_RESULTS_DIR, help="where the results go"
    )
    parser.add_argument(
        "--watch-s",
        type=float,
        default=WATCH_UNTIL_S,
        help=f"watch until this long after the start (default {WATCH_UNTIL_S:.0f}: past the "
        f"GC at {GC_INTERVAL_S:.0f} s; shorter only for a smoke run)",
    )
    args = parser.parse_args(argv)
    if args.writes < 1:
        parser.error("--writes must be at least 1")
    if args.watch_s <= 0:
        parser.error("--watch-s must be positive")
    print(
        f"writing {args.writes} blobs to each Azurite, then watching until {args.watch_s:.0f} s from its "
        f"start (its GC runs at {GC_INTERVAL_S:.0f} s) …",
        flush=True,
    )
    result = asyncio.run(run(args.writes, args.watch_s))
    json_path, _ = write_result(args.results, NAME, result, markdown(result))
    print(markdown(result))
    print(f"\nwritten: {json_path}")


if __name__ == "__main__":
    main()

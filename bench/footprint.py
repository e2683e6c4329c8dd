"""Benchmark: what one replica costs the machine — CPU seconds per minute, resident memory, cold start.

    python -m bench.footprint [--quick | --tiny] [--results DIR]

Read from the same single-replica runs as the Graph-cost benchmark (100 and 1,000 watched chats;
phases no host / idle / busy), with the replica process's CPU time and RSS read from /proc. Cold
start is spawn → first 200 on /readyz, repeated (median quoted); start-up includes the first
discovery sweep, so it grows with the number of chats.
"""

from __future__ import annotations

import sys
from typing import Any

from bench.replica_load import LoadRun, load_run
from bench.report import envelope, load_average, machine_line, markdown_table, percent
from bench.session import BenchSession, run_standalone
from bench.stats import median_of_runs

NAME = "footprint"


def chats_result(run: LoadRun) -> dict[str, Any]:
    return {
        "chats": run.chats,
        "watched_chats": run.watched_chats,
        "cold_start_to_ready_s": median_of_runs([s.seconds for s in run.cold_starts]),
        "rss_mib_at_ready": median_of_runs([s.rss_mib_at_ready for s in run.cold_starts]),
        "phases": [
            {
                "phase": p.name,
                "seconds": p.seconds,
                "cpu_s_per_min": p.cpu_s_per_min,
                "cpu_share_of_one_core": round(p.cpu_s_per_min / 60, 3)
                if p.cpu_s_per_min is not None
                else None,
                "rss_mib": p.rss_mib,
                "chat_poll_cycles": p.chat_poll_cycles,
            }
            for p in run.phases.values()
        ],
    }


async def run(session: BenchSession) -> dict[str, Any]:
    profile = session.profile.load
    started_load = load_average()
    results = [chats_result(await load_run(session, chats)) for chats in profile.chat_counts]
    params = {
        "chat_counts": list(profile.chat_counts),
        "cold_starts": profile.cold_starts,
        "no_host_s": profile.no_host_s,
        "busy_rate_per_s": profile.busy_rate_per_s,
        "steady_window_s": {str(c): profile.steady_window_s(c) for c in profile.chat_counts},
        "source": "/proc/<pid>/stat (utime+stime) and /proc/<pid>/status (VmRSS), sampled every 1 s",
    }
    return {**envelope(NAME, session.profile.name, params, started_load), "results": results}


def markdown(result: dict[str, Any]) -> str:
    starts = markdown_table(
        ["chats", "cold start → /readyz, median s", "min s", "max s", "runs", "RSS at ready MiB"],
        [
            [
                r["chats"],
                r["cold_start_to_ready_s"]["median"],
                r["cold_start_to_ready_s"]["min"],
                r["cold_start_to_ready_s"]["max"],
                r["cold_start_to_ready_s"]["runs"],
                r["rss_mib_at_ready"]["median"],
            ]
            for r in result["results"]
        ],
    )
    phases = markdown_table(
        ["chats", "phase", "window s", "CPU s/min", "of one core", "RSS max MiB", "RSS end MiB"],
        [
            [
                r["chats"],
                p["phase"],
                p["seconds"],
                p["cpu_s_per_min"],
                percent(p["cpu_share_of_one_core"], 1),
                p["rss_mib"]["max"],
                p["rss_mib"]["last"],
            ]
            for r in result["results"]
            for p in r["phases"]
        ],
        align="llrrrrr",
    )
    return f"## Footprint (one replica process)\n\n{starts}\n\n{phases}\n\n{machine_line(result)}\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return run_standalone(NAME, run, markdown, argv, description=__doc__ or NAME)


if __name__ == "__main__":
    main(sys.argv[1:])

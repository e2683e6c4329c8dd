"""Benchmark: delivery latency, from a message's creation in the emulator to its push reaching a host.

    python -m bench.delivery_latency [--quick | --tiny] [--results DIR]

For 1, 2 and 3 replicas on the default settings, each with one connected host,
while seeded humans post chat messages at random times (Poisson) across the chats. Latency is the
host's receive time minus Graph's ``createdDateTime`` (millisecond precision, the same machine's
clock). Replica-side, ``entrabot_delivery_latency_seconds`` records the same span in coarse buckets.
"""

from __future__ import annotations

import sys
from typing import Any

from bench.fleet_traffic import traffic_run
from bench.replica_defaults import cadence_line, replica_defaults
from bench.report import envelope, load_average, machine_line, markdown_table
from bench.session import BenchSession, run_standalone
from bench.stats import ratio, summarize

NAME = "delivery_latency"


async def run(session: BenchSession) -> dict[str, Any]:
    profile = session.profile.traffic
    started_load = load_average()
    rows = []
    for replicas in profile.replicas:
        traffic = await traffic_run(session, replicas)
        outcome = traffic.delivery
        rows.append(
            {
                "replicas": replicas,
                "samples": len(outcome.latencies_s),
                "latency_s": summarize(outcome.latencies_s).as_dict(),
                "posted": outcome.posted,
                "delivered": outcome.delivered,
                "duplicates": outcome.duplicates,
                "missing": outcome.missing,
                "pushes_by_host": outcome.pushes_by_host,
                "posting_s": traffic.posting_s,
                "warmup_s": traffic.warmup_s,
                "graph_429s": traffic.graph["throttled_429"],
            }
        )
    base = rows[0]["latency_s"]["p50"] if rows else None
    for row in rows:
        row["p50_vs_first"] = ratio(row["latency_s"]["p50"] or 0, base or 0)
    params = {
        "replicas": list(profile.replicas),
        "chats": profile.chats,
        "rate_per_s": profile.rate_per_s,
        "window_s": profile.window_s,
        "replica_settings": replica_defaults(),
        "throttle": "emulator default, Graph's limits: chat-message reads 20/s per app, 1/s per chat, "
        "list/get chat 5/s per user, other 30/s; mail 10,000/10 min and 4 in flight per mailbox",
    }
    return {**envelope(NAME, session.profile.name, params, started_load), "rows": rows}


def markdown(result: dict[str, Any]) -> str:
    p = result["parameters"]
    table = markdown_table(
        [
            "replicas",
            "samples",
            "p50 s",
            "p95 s",
            "p99 s",
            "max s",
            "p50 vs 1 replica",
            "missing",
            "duplicates",
            "Graph 429s",
        ],
        [
            [
                r["replicas"],
                r["samples"],
                r["latency_s"]["p50"],
                r["latency_s"]["p95"],
                r["latency_s"]["p99"],
                r["latency_s"]["max"],
                r["p50_vs_first"],
                r["missing"],
                r["duplicates"],
                r["graph_429s"],
            ]
            for r in result["rows"]
        ],
    )
    return (
        "## Delivery latency (message created in Graph → push received by the host)\n\n"
        f"{p['chats']} chats, humans posting {p['rate_per_s']}/s on average for {p['window_s']} s per run, "
        f"{cadence_line()}, one host per replica.\n\n"
        f"{table}\n\n{machine_line(result)}\n"
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return run_standalone(NAME, run, markdown, argv, description=__doc__ or NAME)


if __name__ == "__main__":
    main(sys.argv[1:])

"""Benchmark: what one replica costs in Graph requests, beside Graph's throttling budget.

    python -m bench.graph_cost [--quick | --tiny] [--results DIR]

One replica on the default settings watching 100 and 1,000 chats, counted by the emulator (which
enforces Graph's real limits, see emulator/seed.py ThrottleBudget):

- start-up: the requests of one cold start (who am I, sponsors, the first discovery sweep);
- no host: nothing to deliver to, so only discovery and housekeeping run;
- warm-up: a host connects; the first two cycles (every chat was first watched before: it is read only if
  something moved);
- idle: a host connected, nobody posting;
- busy: humans posting at the profile's rate.

For each: requests per minute by budget bucket, the share of the chat-message budget, the 429s the
emulator answered the replica, and the interval between two successful polls of the same chat (how
long a full sweep really takes). The budget is per app, so every replica of a fleet shares it.
"""

from __future__ import annotations

import math
import sys
from typing import Any

from bench.replica_defaults import cadence_line, replica_defaults
from bench.profiles import CHAT_MESSAGES_BUDGET_PER_S
from bench.replica_load import LoadRun, PhaseMeasure, load_run
from bench.report import envelope, load_average, machine_line, markdown_table, percent
from bench.session import BenchSession, run_standalone
from bench.stats import median_of_runs, ratio

NAME = "graph_cost"
OTHER_BUDGET_PER_S = 30
DEFAULT_DISCOVERY_INTERVAL_S = 120.0
DISCOVERY_ROUTE = "GET /v1.0/me/chats"
GRAPH_PAGE_SIZE = 50  # the $top the replica asks /me/chats for


def phase_row(
    name: str,
    graph: dict[str, Any],
    cycles: int | None = None,
    replica_throttles: int | None = None,
) -> dict[str, Any]:
    seconds = graph["seconds"]
    chat_per_s = graph["chat_message_requests_per_s"]
    return {
        "phase": name,
        "seconds": seconds,
        "requests_per_min": graph["requests_per_min"],
        "chat_message_requests_per_min": graph["chat_message_requests_per_min"],
        "chat_message_requests_per_s": chat_per_s,
        "chat_message_ok_per_s": graph["chat_message_ok_per_s"],
        "chat_message_budget_share": ratio(chat_per_s, CHAT_MESSAGES_BUDGET_PER_S),
        "other_requests_per_min": graph["other_requests_per_min"],
        "other_budget_share": ratio(graph["other_requests_per_min"] / 60, OTHER_BUDGET_PER_S),
        "throttled_429": graph["throttled_429"],
        "throttled_429_per_min": graph["throttled_429_per_min"],
        "replica_counted_429": replica_throttles,
        "chat_poll_cycles": cycles,
        "cycle_period_s": ratio(seconds, cycles) if cycles else None,
        "same_chat_poll_interval_s": graph["sweep_interval_s"],
        "by_route": graph["by_route"],
        "records_truncated": graph["records_truncated"],
    }


def _measured(phase: PhaseMeasure) -> dict[str, Any]:
    row = phase_row(phase.name, phase.graph, phase.chat_poll_cycles, phase.replica_throttles)
    if phase.delivery is not None:
        row["delivery"] = phase.delivery
    return row


def chats_result(run: LoadRun) -> dict[str, Any]:
    starts = run.cold_starts
    pages = math.ceil(run.watched_chats / GRAPH_PAGE_SIZE) or 1
    return {
        "chats": run.chats,
        "watched_chats": run.watched_chats,
        "startup": {
            "requests": median_of_runs([s.graph["requests"] for s in starts]),
            "by_route": starts[-1].graph["by_route"] if starts else {},
            "throttled_429": sum(s.graph["throttled_429"] for s in starts),
        },
        "discovery": {
            "me_chats_requests_at_startup": median_of_runs(
                [s.graph["by_route"].get(DISCOVERY_ROUTE, {}).get("200", 0) for s in starts]
            ),
            "pages_per_sweep": pages,
            # Derived, not measured over a window: one sweep's pages at the default discovery interval.
            "requests_per_min_at_default_interval": round(
                pages * 60 / DEFAULT_DISCOVERY_INTERVAL_S, 1
            ),
        },
        "warmup": {**phase_row("warmup", run.warmup_graph), "seconds_to_steady": run.warmup_s},
        "phases": [_measured(run.phases[name]) for name in ("no_host", "idle", "busy")],
    }


async def run(session: BenchSession) -> dict[str, Any]:
    profile = session.profile.load
    started_load = load_average()
    results = [chats_result(await load_run(session, chats)) for chats in profile.chat_counts]
    params = {
        "chat_counts": list(profile.chat_counts),
        "replicas": 1,
        "replica_settings": replica_defaults(),
        "no_host_s": profile.no_host_s,
        "steady_window_s": {str(c): profile.steady_window_s(c) for c in profile.chat_counts},
        "busy_rate_per_s": profile.busy_rate_per_s,
        "budget": {
            "chat_messages_per_s": CHAT_MESSAGES_BUDGET_PER_S,
            "other_per_s": OTHER_BUDGET_PER_S,
            "scope": "per app per tenant: shared by every replica of the fleet",
        },
    }
    return {**envelope(NAME, session.profile.name, params, started_load), "results": results}


def markdown(result: dict[str, Any]) -> str:
    rows = []
    for r in result["results"]:
        for row in [r["warmup"], *r["phases"]]:
            rows.append(
                [
                    r["chats"],
                    row["phase"],
                    row["seconds"],
                    row["requests_per_min"],
                    row["chat_message_requests_per_s"],
                    percent(row["chat_message_budget_share"], 0),
                    row["chat_message_ok_per_s"],
                    row["other_requests_per_min"],
                    row["throttled_429"],
                    row["throttled_429_per_min"],
                    row["same_chat_poll_interval_s"]["p50"],
                    row["same_chat_poll_interval_s"]["p95"],
                ]
            )
    table = markdown_table(
        [
            "chats",
            "phase",
            "window s",
            "Graph req/min",
            "chat-msg req/s",
            "of 20/s budget",
            "answered/s",
            "other req/min",
            "429s",
            "429s/min",
            "same-chat poll interval p50 s",
            "p95 s",
        ],
        rows,
        align="llrrrrrrrrrr",
    )
    extra = "\n".join(
        f"- {r['chats']} chats: a cold start makes {r['startup']['requests']['median']} Graph requests "
        f"({r['discovery']['me_chats_requests_at_startup']['median']} of them `GET /me/chats`; a discovery sweep is "
        f"{r['discovery']['pages_per_sweep']} page(s), "
        f"≈ {r['discovery']['requests_per_min_at_default_interval']} req/min at the 120 s interval); "
        f"steady polling reached after {r['warmup']['seconds_to_steady']} s" + _busy_latency(r)
        for r in result["results"]
    )
    return (
        f"## Graph cost (one replica, {cadence_line()}, emulator counters)\n\n"
        "Graph's limits are per app per tenant (chat-message reads 20/s, any one chat 1/s, list or get chat "
        "5/s per user, other 30/s, mail 10,000 per 10 min and 4 in flight per mailbox), so every "
        "replica of a fleet shares it. Request rates count every attempt, 429s included (Graph counts them "
        "against the budget too); *answered/s* are the chat-message reads that got data. The same-chat poll "
        "interval is how long a full sweep really takes. Warm-up = the first two cycles after a host connects."
        "\n\n"
        f"{table}\n\n{extra}\n\n{machine_line(result)}\n"
    )


def _busy_latency(r: dict[str, Any]) -> str:
    busy = next((p for p in r["phases"] if p["phase"] == "busy"), None)
    if busy is None or "delivery" not in busy:
        return ""
    d = busy["delivery"]
    return (
        f"; busy: {d['delivered']}/{d['posted']} delivered, latency p50 {d['latency_s']['p50']} s, "
        f"p95 {d['latency_s']['p95']} s"
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return run_standalone(NAME, run, markdown, argv, description=__doc__ or NAME)


if __name__ == "__main__":
    main(sys.argv[1:])

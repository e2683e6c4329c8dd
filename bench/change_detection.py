"""Benchmark: shared change detection — what the fleet costs Graph, and how fast it delivers, as
replicas are added, in each way a fleet learns of new messages.

    python -m bench.change_detection [--quick | --tiny] [--modes M,...] [--chats N,...] [--replicas N,...]
                                     [--results DIR] [--keep-logs]

The matrix is mode × chat count × replica count (one host per replica), each measured idle and busy,
on Graph's real limits (the strict emulator) and Azurite:

- modes: ``ordered`` (the ordered ``/me/chats`` scan), ``notifications`` (Graph change notifications
  with 1 s emulated latency, the scan as a safety net), ``unordered`` (a tenant that refuses the
  ordering: the unordered scan);
- full profile: 1,000 and 10,000 watched chats; 6, 3 and 1 replicas. One fleet per (mode, chats) is
  started on a pre-seeded container (watched list and empty-chat cursors written with the ledger's own
  code, so no replica first-sights 10,000 chats) with 6 replicas and shrunk 6 → 3 → 1 (see
  ``change_detection_fleet``).

Windows of each step (full profile; ``--quick`` halves them, see bench/profiles.py):

- settle (≤ 20 s; a fleet's first step also ≤ 3 s per 1,000 chats × replicas, the start's one cursor
  read per chat per replica): hosts connect; wait until every replica has made two chat-poll cycles
  since and knows every watched chat's cursor, the
  scanner lease names a live replica, and (notifications) a chat subscription exists. Bounded and not
  fatal: a fleet that never settles is measured anyway and the row says so (``steady_after_s`` null);
- idle (15 s): nobody posts, and nobody did for the 30 s before (a step after the first waits for
  that: the scanner scans at its active interval for 30 s after it last found a message). Fleet Graph
  requests/s by route and the 429s, from the emulator;
- idle (discovery interval; full profile, ordered mode, the largest chat count, the first and the last
  step): one more idle window, as long as discovery's interval (120 s), so it holds one walk step of
  discovery (10 pages) where a 15 s window holds none or a whole one, and 40 scans where a 15 s window
  holds 4 or 5: the long-run idle rate. The idle target is checked on both; the 6 ÷ 1 replica idle
  load on these windows alone where both were measured (the 15 s ones differ by a scan);
- busy (20 s posting, + ≤ 15 s drain): humans post 2 messages/s (Poisson) across the chats; the window
  runs until every message reached a host or the drain bound. Requests/s and 429s over the whole
  window, chat-message reads per delivered message, latency (Graph's createdDateTime → push received)
  p50/p95/p99.

Every window also reads each replica's CPU (share of one core) and RSS from /proc
(``process_usage``); the 1-replica rows at 10,000 chats are the footprint target's figures.

Also measured once:

- scanner takeover (ordered mode, the smallest chat count, the largest replica count above 1): the
  replica named in ``leases/chat_scanner.json`` is SIGKILLed and a message is posted at once; timed
  until the lease names another live replica, until the first ``scan`` hint for that chat, and until
  the message reaches a host (≤ 60 s). On a build with no scanner lease: "not measured: no scanner lease";
- sweep recovery (notifications mode, the smallest chat count, 3 replicas): 10 % of notifications
  dropped by the emulator (seeded), humans post for 20 s, drain ≤ 60 s. A message counts as
  *recovered* (reached a host by the scan or the sweep, not its notification) when its latency exceeds
  the notification latency + one default chat-poll interval + 2 s; the same share in the clean busy
  window of that step is given beside it, as the proxy's noise floor. The emulator's count of dropped
  notifications is the expected order of magnitude.

Expected duration on 2 cores: full ≈ 20 min when fleets settle quickly (6 fleets × 3 steps × ~55 s;
pre-seeding 10,000 chats takes 25–50 s per fleet, starting 6 replicas ~20 s; takeover ≤ 60 s, sweep
≤ 80 s); with every wait at its bound (a build whose fleets never settle, like the one before shared
change detection) ≈ 28 min. ``--quick`` (3 modes × 1,000 chats × 3 and 1 replicas, shorter windows)
≈ 6 min. Targets (issue 14) are reported against, never asserted: see
``change_detection_stats.target_checks``; a row measured before its fleet settled is marked "not steady".
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import httpx

from bench.change_detection_fleet import (
    MODES,
    NOTIFICATION_LATENCY_MS,
    BusyWork,
    ModeFleet,
    Window,
    measure_window,
    mode_fleet,
    scanner_takeover,
    settle,
)
from bench.change_detection_stats import (
    LONG_IDLE,
    chat_message_reads,
    graph_reads,
    late_count,
    per_delivered,
    route_rates,
    target_checks,
    top_routes,
)
from bench.fleet_harness import connected_hosts, idle_for
from bench.profiles import QUIET_BEFORE_IDLE_S, ChangeDetectionProfile
from bench.replica_defaults import replica_defaults
from bench.report import envelope, load_average, machine_line, markdown_table
from bench.session import BenchSession, run_standalone
from bench.stats import ratio
from service.devstack.channel_host import ChannelHost
from service.devstack.fleet import ReplicaProcess

NAME = "change_detection"
DEFAULT_CHAT_POLL_S = replica_defaults()["chat_poll_interval_s"]
LATE_SLACK_S = 2.0
LATE_THRESHOLD_S = NOTIFICATION_LATENCY_MS / 1000 + DEFAULT_CHAT_POLL_S + LATE_SLACK_S
SWEEP_REPLICAS = 3


def window_row(
    mf: ModeFleet,
    replicas: int,
    live: int,
    name: str,
    window: Window,
    settled: dict[str, Any],
    delivery: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One window of one step; ``replicas`` is the step's count, ``live`` how many replicas ran it (fewer
    only if one died, e.g. after the takeover's SIGKILL)."""
    graph = window.graph
    by_route = graph["by_route"]
    seconds = window.seconds
    shares = [u["cpu_core_share"] for u in window.usage.values() if u["cpu_core_share"] is not None]
    rss = [u["rss_mib"]["max"] for u in window.usage.values() if u["rss_mib"]["max"] is not None]
    row: dict[str, Any] = {
        "mode": mf.mode,
        "chats": mf.chats,
        "replicas": replicas,
        "replicas_live": live,
        "window": name,
        "seconds": seconds,
        "graph_req_per_s": round(graph["requests"] / seconds, 3) if seconds else 0.0,
        "req_per_s_by_route": route_rates(by_route, seconds),
        "by_route": by_route,
        "throttled_429": graph["throttled_429"],
        "records_truncated": graph["records_truncated"],
        "usage": {
            "per_replica": window.usage,
            "cpu_core_share_max": max(shares, default=None),
            "rss_mib_max": max(rss, default=None),
        },
        "replica_graph_requests": {
            rid: int(d.value("entrabot_graph_requests_total"))
            for rid, d in window.replica_deltas.items()
        },
        "hints_read": _summed(window, "entrabot_chat_hints_total", "outcome"),
        "blob_ops_per_s": round(
            sum(d.value("entrabot_blob_operations_total") for d in window.replica_deltas.values())
            / seconds,
            2,
        )
        if seconds
        else 0.0,
        "settle": settled,
    }
    if delivery is not None:
        row["delivery"] = delivery
        row["chat_message_reads_per_delivered"] = per_delivered(
            chat_message_reads(by_route), delivery["delivered"]
        )
        row["graph_reads_per_delivered"] = per_delivered(
            graph_reads(by_route), delivery["delivered"]
        )
    return row


def _summed(window: Window, metric: str, label: str) -> dict[str, int]:
    total: dict[str, int] = {}
    for delta in window.replica_deltas.values():
        for key, value in delta.by_label(metric, label).items():
            total[key] = total.get(key, 0) + int(value)
    return total


async def sweep_recovery(
    mf: ModeFleet,
    members: list[ReplicaProcess],
    http: httpx.AsyncClient,
    hosts: Sequence[ChannelHost],
    profile: ChangeDetectionProfile,
    clean_latencies: list[float],
) -> dict[str, Any]:
    """Busy traffic with a share of the notifications dropped; see the module docstring."""
    assert profile.sweep_busy_s is not None
    await mf.emulator_admin(http, "POST", "/notifications/stats/reset")
    await mf.emulator_admin(
        http,
        "POST",
        "/notifications/faults",
        {"action": "drop", "fraction": profile.sweep_drop_fraction},
    )
    try:
        work = BusyWork(
            mf,
            hosts,
            http,
            profile.busy_rate_per_s,
            profile.sweep_busy_s,
            profile.sweep_drain_max_s,
        )
        window = await measure_window(mf, members, http, work)
        stats = (await mf.emulator_admin(http, "GET", "/notifications"))["stats"]
    finally:
        await mf.emulator_admin(http, "DELETE", "/notifications/faults")
    outcome = work.outcome()
    latencies = work.latencies()
    late = late_count(latencies, LATE_THRESHOLD_S)
    return {
        "measured": True,
        "mode": mf.mode,
        "chats": mf.chats,
        "replicas": len(members),
        "drop_fraction": profile.sweep_drop_fraction,
        "seconds": window.seconds,
        "posted": outcome["posted"],
        "delivered": outcome["delivered"],
        "missing": outcome["missing"],
        "duplicates": outcome["duplicates"],
        "latency_s": outcome["latency_s"],
        "late_threshold_s": LATE_THRESHOLD_S,
        "recovered_late": late,
        "late_share": ratio(late, len(latencies), 3),
        "clean_window_late_share": ratio(
            late_count(clean_latencies, LATE_THRESHOLD_S), len(clean_latencies), 3
        ),
        "notifications_dropped": stats.get("dropped", 0),
        "notifications_sent": stats.get("sent", 0),
        "graph_req_per_s": round(window.graph["requests"] / window.seconds, 3)
        if window.seconds
        else 0.0,
        "throttled_429": window.graph["throttled_429"],
    }


def _not_run(reason: str) -> dict[str, Any]:
    return {"measured": False, "reason": reason}


async def run(session: BenchSession) -> dict[str, Any]:
    p = session.profile.change_detection
    started_load = load_average()
    steps = sorted(set(p.replicas), reverse=True)
    above_one = [n for n in steps if n > 1]
    takeover_step = above_one[0] if above_one else None
    sweep_step = SWEEP_REPLICAS if SWEEP_REPLICAS in steps else steps[0]
    smallest = min(p.chat_counts)
    takeover: dict[str, Any] | None = None
    sweep: dict[str, Any] | None = None
    rows: list[dict[str, Any]] = []
    fleets: list[dict[str, Any]] = []
    print(
        f"{NAME}: {len(p.modes)} mode(s) × {len(p.chat_counts)} chat count(s) × {len(steps)} replica count(s); "
        f"waits bounded at {p.upper_bound_s() / 60:.0f} min plus fleet starts",
        flush=True,
    )
    for mode in p.modes:
        for chats in p.chat_counts:
            busy_ended = float("-inf")
            async with (
                mode_fleet(session, mode, chats, steps[0]) as mf,
                httpx.AsyncClient(timeout=30) as http,
            ):
                fleets.append(
                    {
                        "mode": mode,
                        "chats": chats,
                        "replicas": steps[0],
                        "preseed_s": mf.preseeded.seconds,
                        "cursors_written": mf.preseeded.cursors_written,
                        "start_s": mf.start_s,
                    }
                )
                for n in steps:
                    print(f"{NAME}: {mode}, {chats} chats, {n} replica(s)", flush=True)
                    members = await mf.shrink_to(n)
                    async with connected_hosts(members) as hosts:
                        bound = p.start_settle_max_s(chats, n) if n == steps[0] else p.settle_max_s
                        settled = await settle(mf, members, http, bound)
                        await asyncio.sleep(
                            max(0.0, busy_ended + QUIET_BEFORE_IDLE_S - time.monotonic())
                        )
                        idle = await measure_window(mf, members, http, idle_for(p.idle_s))
                        rows.append(window_row(mf, n, len(members), "idle", idle, settled))
                        if (
                            p.long_idle_s is not None
                            and mode == "ordered"
                            and chats == max(p.chat_counts)
                            and n in (steps[0], steps[-1])
                        ):
                            idle = await measure_window(mf, members, http, idle_for(p.long_idle_s))
                            rows.append(window_row(mf, n, len(members), LONG_IDLE, idle, settled))
                        work = BusyWork(mf, hosts, http, p.busy_rate_per_s, p.busy_s, p.drain_max_s)
                        busy = await measure_window(mf, members, http, work)
                        busy_ended = time.monotonic()
                        rows.append(
                            window_row(mf, n, len(members), "busy", busy, settled, work.outcome())
                        )
                        if (
                            takeover is None
                            and p.takeover_max_s is not None
                            and mode == "ordered"
                            and chats == smallest
                            and n == takeover_step
                        ):
                            takeover = await scanner_takeover(
                                mf, http, hosts, p.settle_max_s, p.takeover_max_s
                            )
                        if (
                            sweep is None
                            and p.sweep_busy_s is not None
                            and mode == "notifications"
                            and chats == smallest
                            and n == sweep_step
                        ):
                            sweep = await sweep_recovery(
                                mf, members, http, hosts, p, work.latencies()
                            )
    if takeover is None:
        takeover = _not_run(
            "not measured: this run has no ordered-mode step with more than one replica"
            if p.takeover_max_s is not None
            else "not measured: not in this profile"
        )
    if sweep is None:
        sweep = _not_run(
            "not measured: this run has no notifications mode"
            if p.sweep_busy_s is not None
            else "not measured: not in this profile"
        )
    params = {
        "modes": list(p.modes),
        "chat_counts": list(p.chat_counts),
        "replicas": steps,
        "idle_s": p.idle_s,
        "busy_s": p.busy_s,
        "busy_rate_per_s": p.busy_rate_per_s,
        "drain_max_s": p.drain_max_s,
        "settle_max_s": p.settle_max_s,
        "quiet_before_idle_s": QUIET_BEFORE_IDLE_S,
        "long_idle_s": p.long_idle_s,
        "start_settle_s_per_1000_chat_replicas": p.start_settle_s_per_1000_chat_replicas,
        "notification_latency_ms": NOTIFICATION_LATENCY_MS,
        "takeover_max_s": p.takeover_max_s,
        "sweep_busy_s": p.sweep_busy_s,
        "sweep_drain_max_s": p.sweep_drain_max_s,
        "sweep_drop_fraction": p.sweep_drop_fraction,
        "late_threshold_s": LATE_THRESHOLD_S,
        "default_chat_poll_interval_s": DEFAULT_CHAT_POLL_S,
        "replica_settings": "defaults (no ENTRABOT_* interval overridden)",
    }
    return {
        **envelope(NAME, session.profile.name, params, started_load),
        "fleets": fleets,
        "rows": rows,
        "scanner_takeover": takeover,
        "sweep_recovery": sweep,
        "targets": [c.as_dict() for c in target_checks(rows)],
    }


def markdown(result: dict[str, Any]) -> str:
    table = markdown_table(
        [
            "mode",
            "chats",
            "replicas",
            "window",
            "Graph req/s",
            "429s",
            "top routes (req/s)",
            "chat reads/msg",
            "p50 s",
            "p95 s",
            "p99 s",
            "delivered",
            "CPU core max",
            "RSS MiB max",
            "steady after s",
        ],
        [
            [
                r["mode"],
                r["chats"],
                r["replicas"],
                r["window"],
                r["graph_req_per_s"],
                r["throttled_429"],
                top_routes(r),
                r.get("chat_message_reads_per_delivered"),
                *(
                    (
                        [r["delivery"]["latency_s"][k] for k in ("p50", "p95", "p99")]
                        + [f"{r['delivery']['delivered']}/{r['delivery']['posted']}"]
                    )
                    if "delivery" in r
                    else [None] * 4
                ),
                r["usage"]["cpu_core_share_max"],
                r["usage"]["rss_mib_max"],
                r["settle"]["steady_after_s"],
            ]
            for r in result["rows"]
        ],
        align="llrlrrlrrrrrrrr",
    )
    targets = (
        markdown_table(
            ["target", "where", "measured", "limit", "met"],
            [
                [t["target"], t["where"], t["value"], t["limit"], t["met"]]
                for t in result["targets"]
            ],
            align="llrrl",
        )
        if result["targets"]
        else "(no target's rows in this profile)"
    )
    return (
        "## Change detection (fleet Graph cost and latency by mode × chats × replicas)\n\n"
        "Emulator with Graph's real limits; one host per replica; idle then busy "
        f"({result['parameters']['busy_rate_per_s']} msg/s) windows; request rates count every attempt, 429s "
        "included. Latency: Graph's createdDateTime → push received by a host.\n\n"
        f"{table}\n\n"
        f"- Scanner takeover: {_takeover_line(result['scanner_takeover'])}\n"
        f"- Sweep recovery: {_sweep_line(result['sweep_recovery'])}\n\n"
        f"### Targets (issue 14; reported, not asserted)\n\n{targets}\n\n{machine_line(result)}\n"
    )


def _takeover_line(t: dict[str, Any]) -> str:
    if not t["measured"]:
        return str(t["reason"])
    return (
        f"SIGKILL of {t['killed']} (of {t['replicas_before']}): lease held by {t['new_holder']} after "
        f"{t['lease_taken_over_s']} s, first scan hint after {t['first_scan_hint_s']} s, probe message "
        f"delivered after {t['probe_delivered_s']} s (bound {t['bound_s']} s; – = not within it)"
    )


def _sweep_line(s: dict[str, Any]) -> str:
    if not s["measured"]:
        return str(s["reason"])
    return (
        f"{s['mode']}, {s['chats']:,} chats, {s['replicas']} replicas, {s['drop_fraction']:.0%} of "
        f"notifications dropped ({s['notifications_dropped']} of "
        f"{s['notifications_sent'] + s['notifications_dropped']}): "
        f"{s['delivered']}/{s['posted']} delivered, {s['missing']} missing, {s['duplicates']} duplicates; "
        f"{s['recovered_late']} arrived later than {s['late_threshold_s']} s (recovered by the scan or sweep; "
        f"share {s['late_share']}, vs {s['clean_window_late_share']} with no drops); latency p99 "
        f"{s['latency_s']['p99']} s"
    )


def _names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _numbers(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in _names(text))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--modes", help=f"comma-separated subset of {','.join(MODES)}")
    parser.add_argument("--chats", help="comma-separated chat counts, e.g. 1000,10000")
    parser.add_argument("--replicas", help="comma-separated replica counts, e.g. 6,3,1")


def apply_arguments(
    args: argparse.Namespace, session: BenchSession, parser: argparse.ArgumentParser
) -> None:
    """Narrow (or widen) the profile's matrix to the options given."""
    overrides: dict[str, Any] = {}
    if args.modes:
        modes = _names(args.modes)
        if unknown := [m for m in modes if m not in MODES]:
            parser.error(f"--modes: unknown {', '.join(unknown)}; choose from {', '.join(MODES)}")
        overrides["modes"] = modes
    try:
        if args.chats:
            overrides["chat_counts"] = _numbers(args.chats)
        if args.replicas:
            overrides["replicas"] = _numbers(args.replicas)
    except ValueError:
        parser.error("--chats and --replicas take comma-separated whole numbers, e.g. 1000,10000")
    if any(n < 1 for n in (*overrides.get("chat_counts", ()), *overrides.get("replicas", ()))):
        parser.error("--chats and --replicas must be at least 1")
    session.profile = replace(
        session.profile, change_detection=replace(session.profile.change_detection, **overrides)
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return run_standalone(
        NAME, run, markdown, argv, __doc__ or NAME, add_arguments, apply_arguments
    )


if __name__ == "__main__":
    main(sys.argv[1:])

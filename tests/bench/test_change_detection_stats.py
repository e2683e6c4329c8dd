"""The change-detection benchmark's pure parts: rates by route, reads per delivered message, the
late-delivery proxy, which replicas survive a shrink, and the issue's targets over measured rows."""

from __future__ import annotations

from typing import Any

from bench.change_detection_fleet import choose_survivors
from bench.change_detection_stats import (
    LONG_IDLE,
    RSS_LIMIT_MIB,
    chat_message_reads,
    graph_reads,
    late_count,
    per_delivered,
    route_rates,
    target_checks,
    throttled,
)

BY_ROUTE = {
    "GET /v1.0/me/chats": {"200": 8, "429": 2},
    "GET /v1.0/chats/{id}/messages": {"200": 30, "429": 3},
    "GET /v1.0/chats/{id}/messages/newest": {"200": 1},
    "POST /v1.0/subscriptions": {"201": 1},
}


def test_route_rates_count_every_status_including_429s() -> None:
    rates = route_rates(BY_ROUTE, 10.0)
    assert rates["GET /v1.0/me/chats"] == 1.0
    assert rates["GET /v1.0/chats/{id}/messages"] == 3.3
    assert route_rates(BY_ROUTE, 0.0)["POST /v1.0/subscriptions"] == 0.0
    assert throttled(BY_ROUTE) == 5


def test_chat_message_reads_are_gets_of_a_chats_messages_only() -> None:
    assert chat_message_reads(BY_ROUTE) == 34
    assert graph_reads(BY_ROUTE) == 44  # the subscription POST is not a read
    assert per_delivered(34, 20) == 1.7
    assert per_delivered(34, 0) is None  # nothing delivered: no ratio, not infinity


def test_late_count_counts_only_deliveries_beyond_the_threshold() -> None:
    assert late_count([0.5, 4.0, 4.01, 30.0], 4.0) == 2
    assert late_count([], 4.0) == 0


def test_shrinking_keeps_the_preferred_live_replica_then_the_first_others() -> None:
    alive = ["replica-1", "replica-2", "replica-3", "replica-4"]
    assert choose_survivors(alive, ["replica-3"], 2) == ["replica-3", "replica-1"]
    assert choose_survivors(alive, ["replica-9"], 2) == [
        "replica-1",
        "replica-2",
    ]  # a dead manager is no reason
    assert choose_survivors(alive, [], 6) == alive


def row(
    mode: str, chats: int, replicas: int, window: str, req_per_s: float, **extra: Any
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "mode": mode,
        "chats": chats,
        "replicas": replicas,
        "window": window,
        "graph_req_per_s": req_per_s,
        "throttled_429": extra.get("throttled", 0),
        "usage": {
            "cpu_core_share_max": extra.get("cpu", 0.05),
            "rss_mib_max": extra.get("rss", 120.0),
        },
        "settle": {"steady_after_s": extra.get("steady_after_s", 4.0)},
    }
    if window == "busy":
        out["chat_message_reads_per_delivered"] = extra.get("reads", 1.1)
        out["delivery"] = {
            "latency_s": {"p50": extra.get("p50", 1.0), "p99": extra.get("p99", 2.0)}
        }
    return out


def test_targets_compare_six_replicas_with_one_and_check_each_window() -> None:
    rows = [
        row("ordered", 10_000, 1, "idle", 0.4),
        row("ordered", 10_000, 6, "idle", 0.6, throttled=3),
        row("ordered", 10_000, 1, "busy", 2.0, p99=3.5, rss=300.0),
        row("ordered", 10_000, 6, "busy", 2.1, reads=1.5),
        row("unordered", 10_000, 1, "idle", 0.9),
    ]
    checks = {(c.target, c.where): c for c in target_checks(rows)}
    growth_idle = checks[
        ("fleet Graph load at 6 replicas ÷ 1 replica", "ordered, 10,000 chats, idle")
    ]
    assert growth_idle.value == 1.5 and growth_idle.met is False
    assert (
        checks[("fleet Graph load at 6 replicas ÷ 1 replica", "ordered, 10,000 chats, busy")].met
        is True
    )
    assert checks[("idle 429s", "ordered, 10,000 chats, 6 replica(s), idle")].met is False
    assert checks[("idle Graph req/s", "ordered, 10,000 chats, 1 replica(s), idle")].met is True
    # The idle-rate target is for the ordered scan and notifications; the unordered scan has none.
    assert ("idle Graph req/s", "unordered, 10,000 chats, 1 replica(s), idle") not in checks
    assert (
        checks[
            (
                "chat-message reads per delivered message",
                "ordered, 10,000 chats, 6 replica(s), busy",
            )
        ].met
        is False
    )
    assert checks[("latency p99 s", "ordered, 10,000 chats, 1 replica(s), busy")].met is False
    rss = checks[("one replica's RSS MiB (250 MB)", "ordered, 10,000 chats, 1 replica(s), busy")]
    assert rss.limit == RSS_LIMIT_MIB < 250 and rss.met is False
    # Only one replica's footprint is a target: the 6-replica rows carry none.
    assert (
        "one replica's CPU (share of a core)",
        "ordered, 10,000 chats, 6 replica(s), idle",
    ) not in checks


def test_a_target_without_a_measurement_is_unknown_not_met() -> None:
    (check,) = [
        c
        for c in target_checks([row("ordered", 1000, 1, "busy", 1.0, reads=None)])
        if c.target.startswith("chat-message reads")
    ]
    assert check.value is None and check.met is None


def test_a_window_measured_before_the_fleet_was_steady_is_flagged() -> None:
    (check,) = [
        c
        for c in target_checks([row("ordered", 10_000, 1, "idle", 0.0, steady_after_s=None)])
        if c.target == "idle Graph req/s"
    ]
    assert check.where == "ordered, 10,000 chats, 1 replica(s), idle (not steady)"
    assert (
        check.met is True
    )  # still reported as measured: the flag tells the reader what it is worth


def test_the_idle_window_as_long_as_discovery_s_interval_is_checked_against_the_idle_targets() -> (
    None
):
    rows = [
        row("ordered", 10_000, 6, "idle", 0.35),
        row("ordered", 10_000, 6, LONG_IDLE, 0.52, throttled=1),
    ]
    checks = {(c.target, c.where): c for c in target_checks(rows)}
    assert checks[("idle Graph req/s", "ordered, 10,000 chats, 6 replica(s), idle")].met is True
    assert (
        checks[("idle Graph req/s", f"ordered, 10,000 chats, 6 replica(s), {LONG_IDLE}")].met
        is False
    )
    assert checks[("idle 429s", f"ordered, 10,000 chats, 6 replica(s), {LONG_IDLE}")].met is False
    # No 1-replica window of that name: no load ratio is made up for it.
    assert not [c for c in checks.values() if c.target.startswith("fleet Graph load")]


def test_where_both_fleets_had_a_long_idle_window_the_idle_load_ratio_uses_those_alone() -> None:
    rows = [
        row("ordered", 10_000, 6, "idle", 0.40),
        row("ordered", 10_000, 1, "idle", 0.27),
        row("ordered", 10_000, 6, LONG_IDLE, 0.46),
        row("ordered", 10_000, 1, LONG_IDLE, 0.45),
    ]
    growth = [c for c in target_checks(rows) if c.target.startswith("fleet Graph load")]
    assert [(c.where, c.value, c.met) for c in growth] == [
        (f"ordered, 10,000 chats, {LONG_IDLE}", 1.022, True)
    ]

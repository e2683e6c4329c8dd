"""Smoke runs of the benchmarks at their tiniest size: each writes its JSON and markdown with the keys
the README's figures are read from, and counts that show the scenario really ran. Counts only: a
benchmark's figures are never asserted on (no timing assertions in tests)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import delivery_latency
from bench.__main__ import main as run_benchmarks

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

FLEET_BENCHMARKS = (
    "graph_cost",
    "footprint",
    "delivery_latency",
    "claim_efficiency",
    "change_detection",
    "claude_code_latency",
)


@pytest.fixture(scope="module")
def tiny_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tiny run of ``python -m bench`` (graph cost and footprint share one load run, latency and
    claim efficiency one traffic run, as in ``make bench``)."""
    out = tmp_path_factory.mktemp("bench-results")
    assert run_benchmarks(["--tiny", "--results", str(out)]) == 0
    return out


def result(results: Path, name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((results / f"{name}.json").read_text())
    assert data["benchmark"] == name
    assert data["profile"] == "tiny"
    assert {"cpus", "python", "load_average", "load_average_before"} <= data["machine"].keys()
    assert data["parameters"]
    return data


def test_runner_writes_every_result_and_a_summary_naming_each(tiny_results: Path) -> None:
    summary = (tiny_results / "SUMMARY.md").read_text()
    for name in FLEET_BENCHMARKS:
        assert (tiny_results / f"{name}.json").is_file()
        assert (tiny_results / f"{name}.md").read_text().startswith("## ")
    for heading in (
        "## Graph cost",
        "## Footprint",
        "## Delivery latency",
        "## Claim efficiency",
        "## Change detection",
        "## The real Claude Code",
    ):
        assert heading in summary
    assert "Command: `python -m bench --tiny" in summary
    assert "FAILED" not in summary
    assert "## claim_ledger\n\nSkipped:" in summary  # it has no tiny size


def test_graph_cost_counts_polls_only_while_a_host_is_connected(tiny_results: Path) -> None:
    (chats,) = result(tiny_results, "graph_cost")["results"]
    assert chats["watched_chats"] == chats["chats"] == 5
    phases = {p["phase"]: p for p in chats["phases"]}
    assert set(phases) == {"no_host", "idle", "busy"}
    # The delivery rule: without a live target the replica reads no chat messages at all.
    assert phases["no_host"]["chat_message_requests_per_min"] == 0
    # With a host, every cycle scans /me/chats; chat messages are read where something moved.
    assert phases["idle"]["other_requests_per_min"] > 0
    assert (
        phases["busy"]["chat_message_requests_per_min"]
        > phases["idle"]["chat_message_requests_per_min"]
    )
    assert phases["busy"]["delivery"]["posted"] > 0
    assert phases["busy"]["delivery"]["duplicates"] == 0
    assert chats["startup"]["requests"]["median"] > 0
    # Each chat's cursor started at its first watch, before any host, without a Graph read (these
    # chats are empty: no preview, so no watermark); a host arriving reads none of them until
    # something moves.
    reads = chats["warmup"]["by_route"].get("GET /v1.0/chats/{id}/messages", {})
    assert reads.get("200", 0) == 0


def test_footprint_reads_cpu_and_memory_of_the_replica_process(tiny_results: Path) -> None:
    (chats,) = result(tiny_results, "footprint")["results"]
    assert chats["cold_start_to_ready_s"]["runs"] == 1
    assert chats["rss_mib_at_ready"]["median"] > 0
    for phase in chats["phases"]:
        assert phase["rss_mib"]["samples"] > 1
        assert phase["rss_mib"]["max"] > 0
        assert phase["cpu_s_per_min"] is not None


def test_claim_efficiency_counts_every_claim_once(tiny_results: Path) -> None:
    (row,) = result(tiny_results, "claim_efficiency")["rows"]
    assert row["replicas"] == 1
    assert row["claims_by_outcome"]["claimed"] > 0
    assert row["cas_attempts"] >= row["claims_by_outcome"]["claimed"]
    assert row["claimed_messages"] == row["delivered"] > 0
    assert row["exactly_once"] is True


def test_change_detection_measures_an_idle_and_a_busy_window_on_a_preseeded_fleet(
    tiny_results: Path,
) -> None:
    data = result(tiny_results, "change_detection")
    (fleet,) = data["fleets"]
    assert fleet["cursors_written"] == fleet["chats"] == 20
    idle, busy = data["rows"]
    assert (idle["window"], busy["window"]) == ("idle", "busy")
    assert busy["delivery"]["posted"] > 0
    assert busy["delivery"]["delivered"] == busy["delivery"]["posted"]
    assert busy["delivery"]["duplicates"] == 0
    # Delivering needs at least one read of a chat's messages, and every read is counted by route.
    assert busy["chat_message_reads_per_delivered"] > 0
    assert any("/chats/{id}/messages" in route for route in busy["req_per_s_by_route"])
    for row in (idle, busy):
        assert row["usage"]["rss_mib_max"] > 0 and row["usage"]["cpu_core_share_max"] is not None
    assert {t["target"] for t in data["targets"]} >= {"idle 429s", "latency p50 s"}
    assert data["scanner_takeover"] == {
        "measured": False,
        "reason": "not measured: not in this profile",
    }


def test_delivery_latency_standalone_main_writes_one_sample_per_delivered_message(
    tmp_path: Path,
) -> None:
    out = delivery_latency.main(["--tiny", "--results", str(tmp_path)])
    (row,) = out["rows"]
    assert row["posted"] > 0
    assert row["delivered"] == row["posted"] == row["samples"] == row["latency_s"]["count"]
    assert row["duplicates"] == 0
    written = result(tmp_path, "delivery_latency")
    assert written["rows"] == out["rows"]
    assert (tmp_path / "delivery_latency.md").read_text().startswith("## Delivery latency")


def test_claude_code_latency_times_every_post_to_the_model_in_both_modes(
    tiny_results: Path,
) -> None:
    data = result(tiny_results, "claude_code_latency")
    samples = data["parameters"]["samples"]
    assert set(data["modes"]) == {"ordered", "notifications"}
    for mode in data["modes"].values():
        assert mode["post_to_model_s"]["count"] == mode["post_to_claude_code_s"]["count"] == samples
        assert mode["claude_code_to_model_s"]["count"] == samples

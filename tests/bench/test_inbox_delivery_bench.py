"""The inbox benchmark, one tiny run (3 replicas): its shape and its counts, never a figure (timings are
for bench/results, not for assertions)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import inbox_delivery

pytestmark = [pytest.mark.slow, pytest.mark.fleet, pytest.mark.azurite]


@pytest.mark.timeout(600)
def test_a_tiny_run_measures_the_inbox_beside_pushes_and_a_dropped_result_comes_back(
    tmp_path: Path,
) -> None:
    result = inbox_delivery.main(["--tiny", "--results", str(tmp_path)])
    assert [r["replicas"] for r in result["runs"]] == [3]
    for run in result["runs"]:
        push, inbox = run["push"], run["inbox"]
        assert push["latency_ms"]["count"] == inbox["latency_ms"]["count"] == run["messages"]
        assert inbox["duplicates"] == 0 and inbox["calls"] >= run["messages"]
        # each message costs its chat's cursor a look and a write, and the host's record its intent
        assert inbox["blob_ops_by_area_per_message"]["chat_cursors"] >= 2
        assert inbox["blob_ops_by_area_per_message"]["deliveries"] >= 1
        assert (
            inbox["delivery_path_blob_ops_per_message_less_clock_driven"]
            <= inbox["delivery_path_blob_ops_per_message"]
        )
        for idle in (push["idle"], inbox["idle"]):
            assert set(idle) == {
                "blob_ops_per_hour",
                "delivery_path_blob_ops_per_hour",
                "graph_requests_per_hour",
            }
        cancelled = run["cancelled"]
        assert cancelled["redelivered_on"] == "the next call"
        assert cancelled["copies_in_the_next_call"] == 1 and cancelled["acknowledged_after"]
        assert cancelled["after_a_cancelled_wait"] == "the next call"
    stored = json.loads((tmp_path / "inbox_delivery.json").read_text())
    assert stored["runs"] == result["runs"] and stored["commit"] == result["commit"]

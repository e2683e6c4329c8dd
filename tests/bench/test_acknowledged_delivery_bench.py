"""The acknowledged-delivery benchmark, one tiny run (3 replicas): its shape and its counts, never a figure
(timings are for bench/results, not for assertions)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import acknowledged_delivery

pytestmark = [pytest.mark.slow, pytest.mark.fleet, pytest.mark.azurite]


@pytest.mark.timeout(600)
def test_a_tiny_run_measures_both_ways_and_redelivers_once(tmp_path: Path) -> None:
    result = acknowledged_delivery.main(["--tiny", "--results", str(tmp_path)])
    assert [r["replicas"] for r in result["runs"]] == [3]
    for run in result["runs"]:
        before, after = run["before"], run["after"]
        assert (before["acknowledge"], after["acknowledge"]) == (False, True)
        for phase in (before, after):
            assert phase["latency_ms"]["count"] == run["messages"] and phase["duplicates"] == 0
            assert phase["blob_ops_per_message"] == pytest.approx(
                sum(phase["blob_ops_by_op_per_message"].values()), abs=0.1
            )
        assert before["ack_latency_ms_p50"] is None  # nothing acknowledged without a host record
        assert after["ack_latency_ms_p50"] is not None
        # every sample's claim waited for its intent (or found none to wait for, without acknowledgement)
        assert after["intent_on_path_ms"]["claims"] >= run["messages"]
        assert run["added_latency_ms"]["p99"] is not None
        assert (
            after["cursor_read_ms"]["reads"] >= run["messages"]
        )  # the look before each Graph read
        assert set(run["added_over_the_issues_push_ms"]) == {"p50", "p99"}
        for phase in (before, after):
            assert (
                phase["delivery_path_blob_ops_per_message_less_clock_driven"]
                <= phase["delivery_path_blob_ops_per_message"]
            )
        # each message costs its chat's cursor a look (which the claim writes against) and a write; an
        # acknowledging host's record takes at least the intent and the acknowledgement of each message
        assert before["blob_ops_by_area_per_message"]["chat_cursors"] >= 2
        assert after["blob_ops_by_area_per_message"]["chat_cursors"] >= 2
        assert after["blob_ops_by_area_per_message"]["deliveries"] >= 2
        kill = run["redelivery_after_sigkill"]
        assert kill["copies"] == 1 and kill["seconds"] > 0
        assert kill["through"] == (
            "the same replica restarted" if run["replicas"] == 1 else "another replica"
        )
    stored = json.loads((tmp_path / "acknowledged_delivery.json").read_text())
    assert stored["runs"] == result["runs"] and stored["commit"] == result["commit"]

"""The bridge benchmark, run tiny: both paths measured on the same messages, the idle bridge read from /proc."""

from __future__ import annotations

from pathlib import Path

from bench import bridge_latency


def test_bridge_latency_measures_both_paths_per_message_and_the_idle_bridge(tmp_path: Path) -> None:
    result = bridge_latency.main(["--tiny", "--results", str(tmp_path)])
    samples = result["parameters"]["samples"]
    assert result["direct_ms"]["count"] == result["bridge_ms"]["count"] == samples
    assert result["added_per_sample_ms"]["count"] == samples
    assert 0 < result["direct_ms"]["p50"] and 0 < result["bridge_ms"]["p50"]
    assert (
        result["idle"]["rss_mib"] > 10
        and result["idle"]["seconds"] >= result["parameters"]["idle_s"]
    )
    assert (tmp_path / "bridge_latency.md").read_text().startswith("## Channel bridge")

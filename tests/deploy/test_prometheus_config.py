"""deploy/prometheus/prometheus.yml (docker compose): valid for Prometheus, and labels each replica
with `pod`, the label the dashboard's per-replica panels group by (as in Kubernetes)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import yaml

from tests.deploy.deploy_facts import PROMETHEUS_CONFIG


@pytest.mark.skipif(
    shutil.which("promtool") is None, reason="Debian's prometheus (promtool) is not installed"
)
def test_promtool_accepts_the_compose_prometheus_config() -> None:
    result = subprocess.run(
        ["promtool", "check", "config", str(PROMETHEUS_CONFIG)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_relabelling_names_each_replica_as_its_pod() -> None:
    job = yaml.safe_load(PROMETHEUS_CONFIG.read_text())["scrape_configs"][0]
    (rule,) = job["relabel_configs"]
    assert rule["target_label"] == "pod" and rule["source_labels"] == ["__address__"]
    # Prometheus anchors relabel regexes at both ends.
    pattern = re.compile(f"^(?:{rule['regex']})$")
    for target in job["static_configs"][0]["targets"]:
        match = pattern.match(target)
        assert match is not None
        assert rule["replacement"].replace("$1", match.group(1)) == target.split(":")[0]

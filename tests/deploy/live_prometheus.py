"""A real Prometheus (Debian's ``prometheus``) scraping a test's replicas with deploy/prometheus's
configuration: the compose file with the fleet's real targets and short intervals substituted, and the
alerting rules file referenced where it lies, unchanged.

In compose, each target's host is the replica's service name, which the config's relabelling copies
into ``pod``; here every replica listens on 127.0.0.1, so each target is given its ``pod`` label
directly and that relabelling is left out (it would name all three "127.0.0.1").
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from service.devstack.fleet import free_port
from service.devstack.processes import terminate, wait_until_answering
from tests.deploy.deploy_facts import PROMETHEUS_ALERTS, PROMETHEUS_CONFIG

READY_TIMEOUT_S = 30.0
INTERVAL = (
    "1s"  # scrape and rule evaluation: the compose file's 15 s would make a test wait minutes
)


def config_for(pods: Mapping[str, str]) -> dict[str, Any]:
    """deploy/prometheus/prometheus.yml for targets ``pod name -> host:port``."""
    config: dict[str, Any] = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    config["global"] = {
        **config["global"],
        "scrape_interval": INTERVAL,
        "evaluation_interval": INTERVAL,
    }
    config["rule_files"] = [str(PROMETHEUS_ALERTS)]
    [job] = config["scrape_configs"]
    job.pop("relabel_configs")
    job["static_configs"] = [
        {"targets": [target], "labels": {"pod": pod}} for pod, target in pods.items()
    ]
    return config


@dataclass(frozen=True, slots=True)
class Alert:
    name: str
    state: str  # pending | firing (inactive alerts are not listed)
    labels: dict[str, str]


@dataclass
class LivePrometheus:
    workdir: Path
    pods: Mapping[str, str]
    port: int = field(default_factory=free_port)
    _proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "prometheus.yml"
        config.write_text(yaml.safe_dump(config_for(self.pods)))
        with open(self.workdir / "prometheus.log", "ab") as log:
            self._proc = subprocess.Popen(
                [
                    "prometheus",
                    f"--config.file={config}",
                    f"--storage.tsdb.path={self.workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_until_answering(
            f"{self.base_url}/-/ready",
            self._proc,
            what="prometheus",
            timeout=READY_TIMEOUT_S,
            log_tail=self.log_tail,
        )

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            terminate(self._proc, timeout=10)

    def log_tail(self, lines: int = 20) -> str:
        path = self.workdir / "prometheus.log"
        return (
            "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
            if path.exists()
            else "(no log)"
        )

    async def query(self, http: httpx.AsyncClient, promql: str) -> list[dict[str, Any]]:
        """The instant vector ``promql`` evaluates to now (its series, each ``metric`` and ``value``)."""
        response = await http.get(f"{self.base_url}/api/v1/query", params={"query": promql})
        body = response.json()
        assert response.status_code == 200 and body["status"] == "success", f"{promql}: {body}"
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    async def alerts(self, http: httpx.AsyncClient) -> list[Alert]:
        response = await http.get(f"{self.base_url}/api/v1/alerts")
        response.raise_for_status()
        return [
            Alert(a["labels"]["alertname"], a["state"], a["labels"])
            for a in response.json()["data"]["alerts"]
        ]

    async def rules_loaded(self, http: httpx.AsyncClient) -> set[str]:
        response = await http.get(f"{self.base_url}/api/v1/rules")
        response.raise_for_status()
        return {r["name"] for g in response.json()["data"]["groups"] for r in g["rules"]}

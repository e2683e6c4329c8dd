"""An operator sees the hosts a replica serves: ``/readyz`` lists them, ``entrabot_mcp_hosts{kind}``
counts them, and both drop a host the moment its ``--push`` bridge is SIGKILLed; a person's message
posted then shows as waiting for a host, and the alert for it fires on exactly those series.

A real ``entrabot-fleet serve`` on Azurite, the Graph emulator, the bridge as a process
(``entrabot-fleet channel --push``), and Debian's ``promtool`` evaluating deploy/prometheus/alerts.yml
on the samples scraped from the replica.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from emulator.seed import ThrottleBudget, build_seed
from emulator.server import RunningEmulator, start_emulator
from service.bridge.config import HOST_ID_ENV
from service.devstack.azurite import Azurite
from service.devstack.fleet import DEV_TOKEN, ReplicaProcess
from service.devstack.traffic import HumanTraffic
from service.mcp.hosts import BRIDGE_PUSH_CLIENT_NAME
from tests.bridge.bridge_host import bridge_parameters
from tests.deploy.deploy_facts import PROMETHEUS_ALERTS
from tests.mcp.server_fixture import eventually
from tests.service.test_sponsor_wait_takes_one_end_to_end import one_replica

pytestmark = [pytest.mark.azurite, pytest.mark.slow]

# The host must be gone from what the replica reports well before any idle timeout (30 min) or the
# 40 s it stayed before: the kernel closes a killed process's connections at once.
GONE_BOUND_S = 5.0
BOUND_S = 30.0
ALERT = "EntrabotMessagesWaitWithNoHost"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "claude-code", "version": "test"},
    },
}


@pytest.fixture(scope="module")
def emulator() -> Iterator[RunningEmulator]:
    seed = build_seed(chats=3, throttle=ThrottleBudget(chat_messages_per_s=500, other_per_s=500))
    with start_emulator(seed) as running:
        yield running


@pytest.fixture(scope="module")
def replica(
    azurite: Azurite, emulator: RunningEmulator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ReplicaProcess]:
    with one_replica(azurite, emulator, tmp_path_factory.mktemp("readyz-hosts")) as fleet:
        yield fleet.members[0]


async def readyz(replica: ReplicaProcess) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=10) as http:
        body: dict[str, Any] = (await http.get(f"{replica.base_url}/readyz")).json()
        return body


async def scrape(replica: ReplicaProcess) -> dict[str, float]:
    """Every sample of the replica's /metrics, by name and labels as exposed."""
    async with httpx.AsyncClient(timeout=10) as http:
        text = (await http.get(f"{replica.base_url}/metrics")).text
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


async def until(check: Callable[[], Any], what: str, bound_s: float = BOUND_S) -> None:
    await eventually(check, what, timeout_s=bound_s)


async def start_bridge(
    replica: ReplicaProcess, host_id: str, stderr: Path
) -> asyncio.subprocess.Process:
    parameters = bridge_parameters(replica.mcp_url, token=DEV_TOKEN, env={HOST_ID_ENV: host_id})
    with open(stderr, "wb") as errlog:
        process = await asyncio.create_subprocess_exec(
            parameters.command,
            *parameters.args,
            env=parameters.env,
            cwd=parameters.cwd,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=errlog,
        )
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write((json.dumps(INITIALIZE) + "\n").encode())
    await process.stdin.drain()
    answer = json.loads(await asyncio.wait_for(process.stdout.readline(), BOUND_S))
    assert answer["id"] == 1 and "result" in answer
    return process


# Each kind the service counts hosts by; the alert sums them.
HOST_SERIES = ('entrabot_mcp_hosts{kind="push"}', 'entrabot_mcp_hosts{kind="tools"}')
WAITING_SERIES = "entrabot_chats_awaiting_host"


def promtool_case(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    """A promtool unit test: the scraped samples, ``before`` for 3 minutes, then ``after`` for 12;
    quiet while the host was there, firing once the wait outlasted the rule's ``for``."""
    series = [
        {
            "series": name.replace("{", '{pod="r1",', 1) if "{" in name else name + '{pod="r1"}',
            "values": f"{before[name]:g}x3 {after[name]:g}x12",
        }
        for name in (*HOST_SERIES, WAITING_SERIES)
    ]
    [rule] = [
        r
        for group in yaml.safe_load(PROMETHEUS_ALERTS.read_text())["groups"]
        for r in group["rules"]
        if r["alert"] == ALERT
    ]
    return {
        "rule_files": [str(PROMETHEUS_ALERTS)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {"alertname": ALERT, "eval_time": "3m", "exp_alerts": []},
                    {
                        "alertname": ALERT,
                        "eval_time": "14m",
                        "exp_alerts": [
                            {"exp_labels": rule["labels"], "exp_annotations": rule["annotations"]}
                        ],
                    },
                ],
            }
        ],
    }


async def test_a_sigkilled_push_bridge_leaves_readyz_and_the_host_counts_at_once_and_a_message_then_waits_visibly(
    replica: ReplicaProcess, emulator: RunningEmulator, tmp_path: Path
) -> None:
    host_id = f"laptop-{uuid.uuid4().hex[:8]}"
    bridge = await start_bridge(replica, host_id, tmp_path / "bridge.log")
    try:

        async def listed() -> list[dict[str, Any]]:
            hosts: list[dict[str, Any]] = (await readyz(replica))["hosts"]["hosts"]
            return [h for h in hosts if h["id"] == host_id and h["kind"] == "push"]

        await until(listed, "the bridge listed in /readyz as a push host")
        [host] = await listed()
        assert host["client"]["name"] == BRIDGE_PUSH_CLIENT_NAME and host["client"]["version"]
        assert host["acknowledging"] is True and host["since"]
        assert host["owed_by_age"] == {"lt_15s": 0, "lt_60s": 0, "lt_300s": 0, "older": 0}
        before = await scrape(replica)
        assert before['entrabot_mcp_hosts{kind="push"}'] == 1
        assert before["entrabot_push_streams"] == 1
        assert before[WAITING_SERIES] == 0
        body = json.dumps(await readyz(replica))
        assert DEV_TOKEN not in body
    finally:
        bridge.kill()
        await bridge.wait()

    async def gone() -> bool:
        ready = await readyz(replica)
        metrics = await scrape(replica)
        return (
            ready["hosts"]["count"] == 0
            and ready["hosts"]["away"] == 1
            and ready["deliveries"]["hosts_served"] == 0
            and metrics['entrabot_mcp_hosts{kind="push"}'] == 0
            and metrics["entrabot_push_streams"] == 0
        )

    await until(gone, "the killed bridge gone from /readyz and the host counts", GONE_BOUND_S)
    # The SDK still holds the session (until its idle timeout): the old count alone stays stale.
    assert (await scrape(replica))["entrabot_mcp_sessions"] == 1

    seed = emulator.seed
    sponsor = seed.sponsors[0]
    chat = next(c.id for c in seed.chats if sponsor.id in c.members)
    async with httpx.AsyncClient(timeout=30) as http:
        await HumanTraffic(seed, emulator.base_url, http).post_chat(
            sponsor, chat or "", "Is anyone there?"
        )

    async def waiting() -> bool:
        return (await scrape(replica))[WAITING_SERIES] >= 1

    await until(waiting, "the sponsor's message counted as waiting for a host")
    after = await scrape(replica)

    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (make test installs Debian's prometheus as root)")
    case = tmp_path / "no_host_test.yml"
    case.write_text(yaml.safe_dump(promtool_case(before, after)))
    result = subprocess.run(
        [promtool, "test", "rules", str(case)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr

"""``/readyz`` shows who holds each fleet-singleton role, from the lease records under ``leases/``, and
an unreadable record or listing is reported there without making the replica unready.

The replica's own app (``build_replica`` + ``create_app``) under a real uvicorn server, the Graph
emulator over HTTP, the state on a LocalBackend behind the storage fault wrapper.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from settings_env import settings_from_env

from emulator.seed import ThrottleBudget, build_seed
from emulator.server import RunningEmulator, start_emulator
from service.app import create_app
from service.clock import utc_now
from service.devstack.emulator_env import agent_user_env
from service.devstack.fleet import DEV_TOKEN
from service.devstack.uvicorn_runner import serve_app
from service.ledger.fleet.leases import LeaseRecord, lease_key, render_lease
from service.replica_build import build_replica
from service.storage.faults import Fault, FaultRule, FaultyBackend, Op
from service.storage.local import LocalBackend
from service.telemetry.metrics import Metrics

ME = "replica-a"


@pytest.fixture(scope="module")
def emulator() -> Iterator[RunningEmulator]:
    with start_emulator(build_seed(chats=2, throttle=ThrottleBudget.relaxed())) as running:
        yield running


async def _readyz(
    emulator: RunningEmulator, backend: FaultyBackend, tmp_path: Path
) -> tuple[int, dict[str, Any]]:
    settings = settings_from_env(
        {
            **agent_user_env(emulator.seed, base_url=emulator.base_url),
            "ENTRABOT_DATA_DIR": str(tmp_path / "data"),
            "ENTRABOT_MCP_STATIC_TOKENS": DEV_TOKEN,
        }
    )
    replica = build_replica(
        settings, backend=backend, is_cloud=False, replica_id=ME, metrics=Metrics()
    )
    async with serve_app(create_app(replica)) as server, httpx.AsyncClient() as http:
        response = await http.get(f"{server.base_url}/readyz", timeout=30)
    return response.status_code, response.json()


async def test_readyz_names_each_roles_holder_and_reports_an_unreadable_record_while_staying_ready(
    emulator: RunningEmulator, tmp_path: Path
) -> None:
    backend = FaultyBackend(LocalBackend(tmp_path / "state"))
    now = utc_now()
    await backend.write_text(
        lease_key("chat_scanner"),
        render_lease(LeaseRecord("chat_scanner", "replica-b", 4, now + timedelta(seconds=30), now)),
    )
    # No notification URL here, so this replica never runs the subscription manager to take it over.
    await backend.write_text(
        lease_key("subscription_manager"),
        render_lease(
            LeaseRecord(
                "subscription_manager",
                "replica-c",
                2,
                now - timedelta(seconds=1),
                now - timedelta(seconds=31),
            )
        ),
    )
    # An unreadable record is never taken over (the sweep does not act on it).
    await backend.write_text(lease_key("chat_sweep"), "<html>502 Bad Gateway</html>")
    status, body = await _readyz(emulator, backend, tmp_path)
    assert status == 200 and body["ready"] is True, body
    roles = body["leases"]["roles"]
    assert (
        roles["discovery"]["holder"] == ME and roles["discovery"]["this_replica"] is True
    )  # taken at start
    assert roles["discovery"]["state"] == "held"
    assert {k: roles["chat_scanner"][k] for k in ("state", "holder", "epoch", "this_replica")} == {
        "state": "held",
        "holder": "replica-b",
        "epoch": 4,
        "this_replica": False,
    }
    assert (
        roles["subscription_manager"]["state"] == "expired"
        and roles["subscription_manager"]["holder"] == "replica-c"
    )
    assert roles["chat_sweep"] == {"state": "unreadable", "why": "corrupt"}
    assert "error" not in body["leases"]


async def test_readyz_stays_ready_when_the_lease_records_cannot_be_listed(
    emulator: RunningEmulator, tmp_path: Path
) -> None:
    backend = FaultyBackend(LocalBackend(tmp_path / "state"))
    backend.add(FaultRule(Fault.READ_FAILS, key="leases/", ops=frozenset({Op.LIST})))
    status, body = await _readyz(emulator, backend, tmp_path)
    assert status == 200 and body["ready"] is True, body
    assert body["leases"] == {
        "roles": {},
        "error": "lease records unreadable: TransientStorageError",
    }

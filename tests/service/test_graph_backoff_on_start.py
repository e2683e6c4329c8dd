"""A replica (re)started while the fleet holds Graph sends nothing to Graph until the hold ends.

A real replica process on Azurite and the emulator; the hold is a record another replica would have
written. The check is a lower bound the hold guarantees: the emulator saw no Graph request before it
ended.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from emulator.seed import build_seed
from emulator.server import start_emulator
from service.clock import utc_now
from service.devstack.azurite import Azurite
from service.devstack.fleet import READY_TIMEOUT_S, LocalFleet
from service.ledger.fleet.graph_backoff import BACKOFF_KEY, BackoffRecord, render_backoff
from service.storage.blob import BlobBackend
from service.telemetry.metrics import StorageMetrics

pytestmark = pytest.mark.azurite

HOLD = timedelta(seconds=20)  # longer than a replica takes to start, so an ignored hold would show


async def _store_hold(fleet: LocalFleet, record: BackoffRecord) -> None:
    assert fleet.azurite is not None
    store = BlobBackend.from_connection_string(
        fleet.azurite.connection_string, fleet.container, metrics=StorageMetrics()
    )
    try:
        await store.write_text(BACKOFF_KEY, render_backoff(record))
    finally:
        await store.aclose()


def test_a_replica_started_during_a_fleet_hold_sends_nothing_to_graph_until_it_ends(
    azurite: Azurite, tmp_path: Path
) -> None:
    seed = build_seed(chats=1, history=1)
    with start_emulator(seed) as emulator:
        fleet = LocalFleet(seed, tmp_path, replicas=1, azurite=azurite, emulator=emulator)
        fleet.ensure_container()
        now = utc_now()
        hold = BackoffRecord(
            until=now + HOLD, written_at=now, status=503, route="me/chats", writer="replica-9"
        )
        asyncio.run(_store_hold(fleet, hold))
        try:
            # Its start-up waits the hold out before its first Graph call: the hold is on top of the
            # usual readiness budget, not inside it (it failed once on a clean clone, 60 s not being ready).
            fleet.start(ready_timeout_s=HOLD.total_seconds() + READY_TIMEOUT_S)
        finally:
            fleet.stop()
        graph = [r for r in emulator.stats.recent() if r.path.startswith("/v1.0/")]
    assert graph, "the replica never reached Graph"
    first = min(datetime.fromisoformat(r.wall) for r in graph)
    assert first >= hold.until, f"a Graph request at {first.isoformat()} inside the fleet's hold"

"""Several replica processes race on one store: every message is claimed exactly once, faults or not.

Each process writes what it claimed; across processes the union must be every message and the
intersection empty. Run against LocalBackend (several local replicas share one data_dir) and
against Blob on Azurite.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from process_race import race_processes

from service.ledger.claims.email_cursor import (
    EMAIL_CURSOR_KEY,
    EmailCursor,
    render_email_cursor,
)
from service.ledger.fleet.leases import lease_key, parse_lease
from service.storage.backend import MemoryBackend
from service.storage.local import LocalBackend
from service.telemetry.metrics import StorageMetrics
from tests.ledger.ledger_fleet_worker import BASE, CONNECTION_ENV, Mail, chat_messages

WORKER = Path(__file__).with_name("ledger_fleet_worker.py")

pytestmark = pytest.mark.slow
CHAT = "19:fleet-race@thread.v2"
RUN_TIMEOUT_S = 55


@dataclass
class Fleet:
    store: MemoryBackend
    spec: dict[str, Any]  # where the workers find the store
    env: dict[str, str]


@pytest.fixture(params=["local", pytest.param("blob", marks=pytest.mark.azurite)])
async def fleet(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Fleet]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("ENTRABOT_")}
    if request.param == "local":
        root = tmp_path / "shared"
        store: MemoryBackend = LocalBackend(root)
        spec: dict[str, Any] = {"backend": "local", "root": str(root)}
    else:
        from service.storage.blob import BlobBackend

        azurite = request.getfixturevalue("azurite")
        container = request.getfixturevalue("container_name")
        blob = BlobBackend.from_connection_string(
            azurite.connection_string, container, metrics=StorageMetrics()
        )
        await blob.ensure_container()
        store, spec = blob, {"backend": "blob", "container": container}
        env[CONNECTION_ENV] = azurite.connection_string
    try:
        yield Fleet(store, spec, env)
    finally:
        await store.aclose()


async def race(fleet: Fleet, specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Start every worker, release them together, and collect one JSON result from each."""
    argvs = [[sys.executable, str(WORKER), json.dumps({**fleet.spec, **spec})] for spec in specs]
    return await race_processes(
        argvs, env=fleet.env, start_timeout_s=RUN_TIMEOUT_S, run_timeout_s=RUN_TIMEOUT_S
    )


def assert_exactly_once(results: list[dict[str, Any]], expected: set[str]) -> None:
    claimed = [message_id for result in results for message_id in result["claimed"]]
    duplicates = [message_id for message_id, n in Counter(claimed).items() if n > 1]
    assert duplicates == [], f"claimed more than once: {duplicates[:10]}"
    assert set(claimed) == expected, f"never claimed: {sorted(expected - set(claimed))[:10]}"
    assert all(result["done"] for result in results)


def chat_specs(processes: int, **faults: float) -> list[dict[str, Any]]:
    return [
        {"mode": "chat", "chat_id": CHAT, "total": 300, "batch": 25, "seed": 100 + n, **faults}
        for n in range(processes)
    ]


async def test_six_replicas_claim_every_chat_message_exactly_once(fleet: Fleet) -> None:
    results = await race(fleet, chat_specs(6))
    assert_exactly_once(results, {c.id for c in chat_messages(300)})
    assert sum(r["outcomes"].get("lost", 0) for r in results) > 0  # they really raced


async def test_lost_responses_and_failed_reads_still_give_exactly_once_and_lose_nothing(
    fleet: Fleet,
) -> None:
    specs = chat_specs(6, lost_responses=0.10, failed_reads=0.05)
    # Random faults alone leave no claim in doubt in about half the runs (a lost answer is usually
    # settled by the read-back); one scripted claim in doubt makes the run always exercise that path.
    specs[0]["unresolved_at_cycle"] = 2
    results = await race(fleet, specs)
    assert_exactly_once(results, {c.id for c in chat_messages(300)})
    assert sum(r["injected"].get("write_response_lost", 0) for r in results) > 0
    assert sum(r["outcomes"].get("unresolved", 0) for r in results) > 0


async def test_a_brand_new_chat_raced_by_six_replicas_has_one_winner_per_message(
    fleet: Fleet,
) -> None:
    specs = [{"mode": "chat_once", "chat_id": CHAT, "total": 20, "seed": n} for n in range(6)]
    results = await race(fleet, specs)
    assert_exactly_once(results, {c.id for c in chat_messages(20)})
    assert sum(1 for r in results if r["claimed"]) == 1


async def seed_email_cursor(store: MemoryBackend) -> None:
    start = BASE - timedelta(seconds=1)
    await store.write_text(
        EMAIL_CURSOR_KEY, render_email_cursor(EmailCursor(start)), if_absent=True
    )


async def test_four_replicas_claim_every_mail_exactly_once_despite_faults_and_a_hold(
    fleet: Fleet,
) -> None:
    await seed_email_cursor(fleet.store)
    specs = [
        {
            "mode": "email",
            "total": 500,
            "seed": 200 + n,
            "lost_responses": 0.10,
            "failed_reads": 0.05,
        }
        for n in range(4)
    ]
    specs[0]["hold_at_cycle"] = 1
    results = await race(fleet, specs)
    assert_exactly_once(results, {Mail(n).id for n in range(1, 501)})
    stats = {k: v for k, v in results[0].items() if k != "claimed"}
    assert results[0]["hold_cycles"] >= 2, stats  # the scripted hold happened ...
    assert all(r["early_deliveries"] == 0 for r in results)  # ... and nothing left a hold early


async def test_replica_processes_take_back_a_role_whose_record_stays_unparseable_exactly_one_of_them(
    fleet: Fleet,
) -> None:
    """Three processes keep one role's lease (ttl 4 s) over a record that does not parse: one of them,
    and only one, takes it over once it stood a lease lifetime, and no two ever act in the role at once."""
    await fleet.store.write_text(
        lease_key("scanner"), '{"role": "scanner", "holder": "gone", "epoch"'
    )
    specs = [
        {
            "mode": "lease",
            "role": "scanner",
            "holder": f"replica-{n}",
            "ttl_s": 4.0,
            "run_s": 12.0,
            "seed": n,
        }
        for n in range(3)
    ]
    results = await race(fleet, specs)
    takers = [r["holder"] for r in results if r["events"].get("taken_unreadable")]
    assert len(takers) == 1, results
    spans = sorted((r["held_from"], r["held_to"]) for r in results if r["held_from"] is not None)
    assert spans, results
    assert all(earlier[1] < later[0] for earlier, later in zip(spans, spans[1:])), (
        spans
    )  # never two at once
    assert sum(r["holding"] for r in results) <= 1
    stored = parse_lease(await fleet.store.read_text(lease_key("scanner")) or "")
    assert stored.holder in {r["holder"] for r in results}

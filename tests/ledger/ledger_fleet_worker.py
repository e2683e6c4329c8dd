"""One replica in a ledger race, run as its own process by test_fleet_claims.py.

    python ledger_fleet_worker.py '<json spec>'

It builds its store (a LocalBackend directory, or a Blob container in Azurite whose connection
string comes from ENTRABOT_TEST_BLOB_CONNECTION_STRING), wraps it in a FaultyBackend, prints
``ready``, waits for a line on stdin so every racer starts together, runs its polling loop and
prints one JSON line: what it claimed and what happened on the way.

Modes:
* ``chat``: a chat of ``total`` messages that appear over time; each cycle this replica sees a few
  more (its own pace, so replicas' batches interleave) and claims everything past its watermark.
* ``chat_once``: every replica offers the same messages of a brand-new chat, once.
* ``lease``: keeps one role's lease for ``run_s`` seconds (real clocks, ttl ``ttl_s``) and reports the
  wall-clock span in which it held the role and each lease step it took.
* ``email``: one mailbox of ``total`` mails arriving in bursts on a schedule shared by every process,
  polled through the EmailClaimer.
Faults fire while messages are still arriving; then the store heals and the replica runs until
everything is decided and nothing is left unsettled.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from service.ledger.claims.chat_cursor import Candidate
from service.ledger.claims.chat_ledger import ChatLedger
from service.ledger.claims.email_claims import EmailClaimer, EmailCycleOutcome, EmailState
from service.ledger.fleet.leases import Lease
from service.storage.backend import MemoryBackend
from service.storage.faults import Fault, FaultPlan, FaultRule, FaultyBackend
from service.storage.local import LocalBackend
from service.telemetry.metrics import LedgerMetrics, Metrics, StorageMetrics

BASE = datetime(2026, 11, 29, 10, 0, tzinfo=timezone.utc)
CONNECTION_ENV = "ENTRABOT_TEST_BLOB_CONNECTION_STRING"
MAX_CYCLES = 5_000
BURST_EVERY_S = 0.06


def chat_messages(total: int) -> list[Candidate]:
    """The same chat in every process: Teams ids are the epoch milliseconds of their time."""
    out = []
    for n in range(total):
        ts = BASE + timedelta(milliseconds=10 * n)
        out.append(Candidate(str(int(ts.timestamp() * 1000)), ts))
    return out


class Mail:
    __slots__ = ("id", "received_at")

    def __init__(self, n: int) -> None:
        self.id = f"mail-{n:04d}"
        self.received_at = BASE + timedelta(seconds=n)


async def open_store(spec: dict[str, Any]) -> MemoryBackend:
    if spec["backend"] == "local":
        return LocalBackend(Path(spec["root"]))
    from service.storage.blob import BlobBackend

    return BlobBackend.from_connection_string(
        os.environ[CONNECTION_ENV], spec["container"], metrics=StorageMetrics()
    )


def fault_plan(spec: dict[str, Any], key: str) -> FaultPlan:
    rules = []
    if spec.get("lost_responses"):
        rules.append(
            FaultRule(Fault.WRITE_RESPONSE_LOST, key=key, probability=spec["lost_responses"])
        )
    if spec.get("failed_reads"):
        rules.append(FaultRule(Fault.READ_FAILS, key=key, probability=spec["failed_reads"]))
    return FaultPlan(tuple(rules), seed=spec["seed"])


async def run_chat(
    spec: dict[str, Any], faulty: FaultyBackend, rng: random.Random
) -> dict[str, Any]:
    everything = chat_messages(spec["total"])
    ledger = ChatLedger[Candidate](faulty, metrics=LedgerMetrics())
    chat = spec["chat_id"]
    visible = watermark = cycles = 0
    claimed: list[str] = []
    outcomes: Counter[str] = Counter()
    while cycles < MAX_CYCLES:
        cycles += 1
        visible = min(len(everything), visible + rng.randint(1, spec["batch"]))
        if visible == len(everything):
            faulty.heal()
        candidates = everything[watermark:visible]
        if cycles == spec.get("unresolved_at_cycle"):
            # A scripted claim in doubt, so the run surely has one: its write commits, the answer is
            # lost, and the read-backs that would settle it fail.
            faulty.add(
                FaultRule(Fault.WRITE_RESPONSE_LOST, key="chat_cursors/*", times=1),
                FaultRule(Fault.READ_FAILS, key="chat_cursors/*", times=3, skip=1),
            )
        claim = await ledger.claim(chat, candidates, candidates[-1].ts if candidates else None)
        outcomes[claim.outcome.value] += 1
        claimed.extend(claim.ids)
        if claim.may_advance:
            watermark = visible
        if watermark == len(everything) and not ledger.unsettled_chats:
            break
        await asyncio.sleep(rng.random() * 0.003)
    return {
        "claimed": claimed,
        "outcomes": outcomes,
        "cycles": cycles,
        "done": watermark == len(everything),
    }


async def run_chat_once(spec: dict[str, Any], faulty: FaultyBackend) -> dict[str, Any]:
    ledger = ChatLedger[Candidate](faulty, metrics=LedgerMetrics())
    claim = await ledger.claim(spec["chat_id"], chat_messages(spec["total"]))
    return {
        "claimed": list(claim.ids),
        "outcomes": {claim.outcome.value: 1},
        "cycles": 1,
        "done": claim.may_advance,
    }


def mail_arrivals(total: int) -> list[tuple[float, int]]:
    """When each burst of mail arrives (seconds after the start) and its size: the same in every process."""
    shared = random.Random(4242)
    arrivals: list[tuple[float, int]] = []
    left = total
    while left:
        size = min(left, shared.choice((3, 20, 60)))
        arrivals.append((BURST_EVERY_S * len(arrivals), size))
        left -= size
    return arrivals


async def run_email(
    spec: dict[str, Any], faulty: FaultyBackend, rng: random.Random
) -> dict[str, Any]:
    mails = [Mail(n) for n in range(1, spec["total"] + 1)]
    claimer: EmailClaimer[Mail] = EmailClaimer(faulty, is_cloud=True, metrics=LedgerMetrics())
    visible = cycles = fetches = hold_cycles = early_deliveries = 0
    # A scripted hold: from cycle ``hold_at_cycle``, the next claim commits but its answer is lost and
    # the following nine reads (three cycles of settling) fail.
    hold = "pending" if spec.get("hold_at_cycle") else "none"
    delivered: list[str] = []
    outcomes: Counter[str] = Counter()

    async def fetch(since: datetime) -> Sequence[Mail]:
        nonlocal fetches, hold
        fetches += 1
        page = [m for m in mails[:visible] if m.received_at > since][:50]
        if hold == "pending" and page and cycles >= spec["hold_at_cycle"]:
            faulty.add(
                FaultRule(Fault.WRITE_RESPONSE_LOST, times=1), FaultRule(Fault.READ_FAILS, times=9)
            )
            hold = "armed"
        return page

    arrivals = mail_arrivals(len(mails))
    started = time.monotonic()
    while cycles < MAX_CYCLES:
        cycles += 1
        elapsed = time.monotonic() - started
        visible = sum(size for at, size in arrivals if at <= elapsed)
        if visible == len(mails) and hold in ("none", "done"):
            faulty.heal()
        was_holding = claimer.state is EmailState.HOLDING
        fetches_before = fetches
        cycle = await claimer.run_cycle(fetch)
        outcomes[cycle.outcome.value] += 1
        if was_holding and cycle.outcome is EmailCycleOutcome.HOLDING:
            hold_cycles += 1
            if cycle.deliver or fetches != fetches_before:
                early_deliveries += 1
        if hold == "armed" and hold_cycles and claimer.state is EmailState.IDLE:
            hold = "done"
        delivered.extend(m.id for m in cycle.deliver)
        settled_at_the_end = (
            claimer.state is EmailState.IDLE and cycle.outcome is EmailCycleOutcome.NOTHING_NEW
        )
        if visible == len(mails) and settled_at_the_end:
            break
        await asyncio.sleep(rng.random() * 0.003)
    return {
        "claimed": delivered,
        "outcomes": outcomes,
        "cycles": cycles,
        "hold_cycles": hold_cycles,
        "early_deliveries": early_deliveries,
        "done": claimer.state is EmailState.IDLE,
    }


async def run_lease(spec: dict[str, Any], store: MemoryBackend) -> dict[str, Any]:
    ttl = timedelta(seconds=spec["ttl_s"])
    metrics = Metrics()
    lease = Lease(
        store, spec["role"], spec["holder"], ttl=ttl, margin=ttl / 4, metrics=metrics.roles
    )
    held: list[float] = []  # wall-clock moments this replica acted in the role
    deadline = time.monotonic() + spec["run_s"]
    while time.monotonic() < deadline:
        if await lease.keep():
            held.append(time.time())
        await asyncio.sleep(0.05)
    events = {
        sample.labels["event"]: sample.value
        for family in metrics.registry.collect()
        if family.name == "entrabot_lease_events"
        for sample in family.samples
        if sample.name.endswith("_total")
    }
    return {
        "holder": spec["holder"],
        "events": events,
        "held_from": held[0] if held else None,
        "held_to": held[-1] if held else None,
        "holding": lease.held(),
    }


async def main(spec: dict[str, Any]) -> None:
    store = await open_store(spec)
    key = "poll_state/*" if spec["mode"] == "email" else "chat_cursors/*"
    faulty = FaultyBackend(store, fault_plan(spec, key))
    rng = random.Random(spec["seed"])
    try:
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        started = time.perf_counter()
        if spec["mode"] == "lease":
            result = await run_lease(spec, store)
        elif spec["mode"] == "chat":
            result = await run_chat(spec, faulty, rng)
        elif spec["mode"] == "chat_once":
            result = await run_chat_once(spec, faulty)
        else:
            result = await run_email(spec, faulty, rng)
        result["seconds"] = round(time.perf_counter() - started, 3)
        result["injected"] = {fault.value: n for fault, n in faulty.injected.items()}
        print(json.dumps(result), flush=True)
    finally:
        await faulty.aclose()


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))

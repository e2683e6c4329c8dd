"""Benchmark: the chat claim ledger against Azurite, with 1, 2, 4 and 8 racing replica processes.

    python -m bench.claim_ledger

For each replica count it measures, on one chat and on messages spread over 50 chats: claimed
messages per second (fleet-wide) and conditional writes sent per successful claim (CAS attempts,
settle resends included). Beside them, Azurite's raw rate for one writer doing back-to-back
If-Match writes to one blob, measured in the same run. Results go to
``bench/results/claim_ledger.json``; a markdown table is printed. Sized for 2 cores (~1–2 minutes).

Every replica sees every message at once and offers the next ``BATCH`` past its own watermark, so
the numbers are the ledger's ceiling under full contention, not a Graph-paced steady state.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from service.telemetry.metrics import StorageMetrics
from service.ledger.claims.chat_claim_types import ChatClaimOutcome
from service.ledger.claims.chat_ledger import ChatLedger
from service.ledger.claims.chat_cursor import Candidate
from service.telemetry.metrics import LedgerMetrics

RESULTS = Path(__file__).resolve().parent / "results" / "claim_ledger.json"
CONNECTION_ENV = "ENTRABOT_BENCH_BLOB_CONNECTION_STRING"
REPLICAS = (1, 2, 4, 8)
BATCH = 10
LAYOUTS = {"one_chat": (1, 1000), "fifty_chats": (50, 60)}  # (chats, messages per chat)
RUN_DEADLINE_S = 25.0
RAW_SECONDS = 3.0
BASE = datetime(2026, 11, 29, 10, 0, tzinfo=timezone.utc)


def chat_messages(chat: int, count: int) -> list[Candidate]:
    out = []
    for n in range(count):
        ts = BASE + timedelta(seconds=chat, milliseconds=n)
        out.append(Candidate(str(int(ts.timestamp() * 1000)), ts))
    return out


# --- one replica (a child process) ---


async def replica(spec: dict[str, Any]) -> dict[str, Any]:
    from service.storage.blob import BlobBackend

    store = BlobBackend.from_connection_string(
        os.environ[CONNECTION_ENV], spec["container"], metrics=StorageMetrics()
    )
    ledger = ChatLedger[Candidate](store, metrics=LedgerMetrics())
    chats = {f"bench-chat-{c}": chat_messages(c, spec["per_chat"]) for c in range(spec["chats"])}
    watermark = dict.fromkeys(chats, 0)
    claimed: list[str] = []
    wins = writes = 0
    try:
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        started = time.perf_counter()
        while (
            any(watermark[c] < len(m) for c, m in chats.items())
            and time.perf_counter() - started < RUN_DEADLINE_S
        ):
            for chat, messages in chats.items():
                if watermark[chat] >= len(messages):
                    continue
                batch = messages[watermark[chat] : watermark[chat] + BATCH]
                claim = await ledger.claim(chat, batch, batch[-1].ts)
                writes += claim.writes
                claimed.extend(claim.ids)
                wins += claim.outcome is ChatClaimOutcome.CLAIMED
                if claim.may_advance:
                    watermark[chat] += len(batch)
        elapsed = time.perf_counter() - started
    finally:
        await store.aclose()
    return {"claimed": claimed, "wins": wins, "writes": writes, "seconds": elapsed}


# --- the orchestrator ---


@dataclass
class Row:
    layout: str
    replicas: int
    messages: int
    claimed: int
    seconds: float
    messages_per_s: float
    cas_attempts_per_claim: float
    exactly_once: bool


async def race(
    conn: str, container: str, replicas: int, chats: int, per_chat: int
) -> list[dict[str, Any]]:
    spec = json.dumps({"container": container, "chats": chats, "per_chat": per_chat})
    env = {**os.environ, CONNECTION_ENV: conn}
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.claim_ledger",
            "--replica",
            spec,
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            cwd=Path(__file__).resolve().parents[1],
        )
        for _ in range(replicas)
    ]
    for proc in procs:
        assert proc.stdout is not None
        await asyncio.wait_for(proc.stdout.readline(), 60)
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
        await proc.stdin.drain()
    outputs = await asyncio.wait_for(
        asyncio.gather(*(p.communicate() for p in procs)), RUN_DEADLINE_S + 30
    )
    return [json.loads(out.decode().strip().splitlines()[-1]) for out, _ in outputs]


async def raw_conditional_writes(conn: str) -> float:
    """Back-to-back If-Match writes by one writer to one blob: Azurite's ceiling for a ledger key."""
    from service.storage.blob import BlobBackend

    store = BlobBackend.from_connection_string(conn, "bench-raw", metrics=StorageMetrics())
    await store.ensure_container()
    try:
        etag = await store.write_text("raw", "0")
        count = 0
        started = time.perf_counter()
        while time.perf_counter() - started < RAW_SECONDS:
            count += 1
            etag = await store.write_text("raw", str(count), if_match=etag)
        return count / (time.perf_counter() - started)
    finally:
        await store.aclose()


async def run() -> dict[str, Any]:
    from service.devstack.azurite import start_azurite
    from service.storage.blob import BlobBackend

    azurite = start_azurite()
    try:
        conn = azurite.connection_string
        raw = await raw_conditional_writes(conn)
        rows: list[Row] = []
        for layout, (chats, per_chat) in LAYOUTS.items():
            for replicas in REPLICAS:
                container = "bench" + uuid.uuid4().hex[:16]
                setup = BlobBackend.from_connection_string(
                    conn, container, metrics=StorageMetrics()
                )
                await setup.ensure_container()
                await setup.aclose()
                results = await race(conn, container, replicas, chats, per_chat)
                ids = [i for r in results for i in r["claimed"]]
                claimed = len(ids)
                seconds = max(r["seconds"] for r in results)
                wins = sum(r["wins"] for r in results)
                rows.append(
                    Row(
                        layout=layout,
                        replicas=replicas,
                        messages=chats * per_chat,
                        claimed=claimed,
                        seconds=round(seconds, 2),
                        messages_per_s=round(claimed / seconds, 1),
                        cas_attempts_per_claim=round(
                            sum(r["writes"] for r in results) / max(wins, 1), 2
                        ),
                        exactly_once=len(set(ids)) == claimed == chats * per_chat,
                    )
                )
                print(
                    f"  {layout:11} {replicas} replica(s): {rows[-1].messages_per_s} msg/s",
                    file=sys.stderr,
                )
        return {
            "benchmark": "claim_ledger",
            "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "azurite": azurite.kind,
            },
            "batch": BATCH,
            "raw_single_writer_conditional_writes_per_s": round(raw, 1),
            "rows": [asdict(row) for row in rows],
        }
    finally:
        azurite.stop()


def table(result: dict[str, Any]) -> str:
    lines = [
        f"Azurite raw single-writer conditional writes: {result['raw_single_writer_conditional_writes_per_s']}/s",
        "",
        "| layout | replicas | messages | claimed msg/s | CAS attempts per claim | exactly once |",
        "|---|---:|---:|---:|---:|:---:|",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['layout']} | {row['replicas']} | {row['messages']} | {row['messages_per_s']} | "
            f"{row['cas_attempts_per_claim']} | {'yes' if row['exactly_once'] else 'NO'} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--replica"]:
        print(json.dumps(asyncio.run(replica(json.loads(args[1])))), flush=True)
        return
    result = asyncio.run(run())
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    tmp = RESULTS.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    tmp.replace(RESULTS)
    print(table(result))


if __name__ == "__main__":
    main()

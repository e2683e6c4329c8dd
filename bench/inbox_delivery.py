"""Benchmark: the inbox of hosts without pushes beside the bridge's pushes (issue 35).

    python -m bench.inbox_delivery [--quick] [--results DIR]

Replica processes on Azurite and the Graph emulator behind the loopback balancer (the tests' harness,
tests/bridge, imported, not copied). At 1 and at 3 replicas, in one fleet:

* **Push latency**: a channel bridge (``--push``, acknowledging) alone as the host; messages posted one
  at a time, each timed from the post to the bridge's stdout.
* **Inbox latency**: the bridge gone, a host without pushes (the MCP Python client, as
  tests/support/inbox_host.py) calling ``receive_messages`` in a loop through the balancer; the same
  messages, each timed from the post to the call result that holds it.
* **Blob operations per message delivered through the inbox**, claim and acknowledgement included:
  the delivery path's areas (``chat_cursors``, ``deliveries``) of every replica's
  ``entrabot_blob_operations_total`` over the inbox window, and the same less their idle rate (what the
  clock drives: the inbox scan's reads, the sweep's cursor reads), and every Blob call per message.
* **An idle host's cost per hour**: Blob operations and Graph requests of the whole fleet over an idle
  window with the inbox host looping, beside the same window with the bridge connected instead. Both
  hosts make the fleet watch its chats (change detection), so what the inbox costs Graph is the
  difference (target 0).
* **A cancelled call**: a call that returned a message the host dropped (as when its tool timeout fires
  as the answer comes), then the next call with the old cursor: which call brought it back, and how
  long after; and a call cancelled while it waited, with the message posted after it: it reaches the
  next call, once.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from bench.acknowledged_delivery import (
    ARRIVAL_POLL_S,
    DELIVERY_PATH_AREAS,
    ENV,
    _blob_ops,
    _post_one,
    _scrape_all,
)
from bench.replica_metrics import MetricsScrape
from bench.report import at_one_and_three_replicas, machine_line, markdown_table
from bench.session import BenchSession, run_standalone
from bench.stats import summarize
from service.bridge.config import HOST_ID_ENV
from service.bridge.written_log import STATE_DIR_ENV
from emulator.seed import SeedUser
from service.devstack.fleet import DEV_TOKEN
from service.domain.message import MessageKey
from tests.bridge.bridge_host import bridge_host
from tests.bridge.fleet_stack import BridgeFleet, bridge_fleet

# The inbox host lives in tests/support, which the tests import by bare names (pytest's `pythonpath`);
# outside pytest that folder goes on the path here, as bench/claude_code_latency.py does.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from inbox_host import InboxLoop  # noqa: E402

NAME = "inbox_delivery"
TARGET_P99_OVER_PUSH_MS = 200.0
TARGET_BLOB_OPS_PER_MESSAGE = 4.0
TARGET_IDLE_GRAPH_PER_HOUR = 0.0
INBOX_WAIT_S = 20.0
INBOX_HOST = "bench-inbox"


def _sizes(session: BenchSession) -> tuple[int, float]:
    """(messages per latency phase, idle window in seconds)."""
    return {"tiny": (3, 10.0), "quick": (10, 30.0)}.get(session.profile.name, (60, 120.0))


def _graph_requests(before: list[MetricsScrape], after: list[MetricsScrape]) -> float:
    return sum(
        later.minus(earlier).value("entrabot_graph_requests_total")
        for earlier, later in zip(before, after, strict=True)
    )


async def _idle(stack: BridgeFleet, http: httpx.AsyncClient, idle_s: float) -> dict[str, float]:
    members = stack.fleet.members
    before = await _scrape_all(http, members)
    started = time.perf_counter()
    await asyncio.sleep(idle_s)
    after = await _scrape_all(http, members)
    hours = (time.perf_counter() - started) / 3600
    areas = _blob_ops(before, after, "area")
    return {
        "blob_ops_per_hour": round(sum(areas.values()) / hours, 1),
        "delivery_path_blob_ops_per_hour": round(
            sum(areas.get(a, 0.0) for a in DELIVERY_PATH_AREAS) / hours, 1
        ),
        "graph_requests_per_hour": round(_graph_requests(before, after) / hours, 1),
    }


async def _push_phase(
    stack: BridgeFleet, http: httpx.AsyncClient, workdir: Path, messages: int, idle_s: float
) -> dict[str, Any]:
    env = {HOST_ID_ENV: "bench-push", STATE_DIR_ENV: str(workdir / "state")}
    workdir.mkdir(parents=True, exist_ok=True)
    async with bridge_host(
        stack.balancer.url(), workdir / "bridge.log", token=DEV_TOKEN, env=env
    ) as (_, received):
        await stack.wait_bootstrapped()
        await _post_one(stack, received, 0, "push warm-up")
        samples = [await _post_one(stack, received, n, "push") for n in range(1, messages + 1)]
        idle = await _idle(stack, http, idle_s)
    return {"latency_ms": summarize([s * 1000 for s in samples]).as_dict(), "idle": idle}


async def _inbox_phase(
    stack: BridgeFleet, http: httpx.AsyncClient, messages: int, idle_s: float
) -> dict[str, Any]:
    members = stack.fleet.members
    host = InboxLoop(stack.balancer.url, DEV_TOKEN, host_id=INBOX_HOST, wait_s=INBOX_WAIT_S)
    loop = asyncio.create_task(host.run())
    try:
        await _post_one(stack, host, 0, "inbox warm-up")
        before = await _scrape_all(http, members)
        started = time.perf_counter()
        samples = [await _post_one(stack, host, n, "inbox") for n in range(1, messages + 1)]
        calls = host.calls
        while host.calls < calls + 1:  # the next call acknowledges the last sample
            await asyncio.sleep(ARRIVAL_POLL_S)
        await asyncio.sleep(0.5)
        after = await _scrape_all(http, members)
        window_s = time.perf_counter() - started
        idle = await _idle(stack, http, idle_s)
    finally:
        host.stop()
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
    ops, areas = _blob_ops(before, after), _blob_ops(before, after, "area")
    path = sum(areas.get(a, 0.0) for a in DELIVERY_PATH_AREAS)
    clock_driven = idle["delivery_path_blob_ops_per_hour"] / 3600 * window_s
    return {
        "latency_ms": summarize([s * 1000 for s in samples]).as_dict(),
        "delivery_path_blob_ops_per_message": round(path / messages, 2),
        "delivery_path_blob_ops_per_message_less_clock_driven": round(
            (path - clock_driven) / messages, 2
        ),
        "blob_ops_by_area_per_message": {
            a: round(v / messages, 2) for a, v in sorted(areas.items()) if v
        },
        "blob_ops_per_message": round(sum(ops.values()) / messages, 2),
        "duplicates": sum(n - 1 for n in host.counts().values() if n > 1),
        "calls": host.calls,
        "reconnects": host.failures,
        "idle": idle,
        "cursor": host.cursor,
    }


async def _cancelled(stack: BridgeFleet, cursor: str | None) -> dict[str, Any]:
    """A dropped result comes back on the next call; a call cancelled while waiting loses nothing.
    The inbox phase's host, with its last cursor: a second inbox host would share the messages."""
    host = InboxLoop(stack.balancer.url, DEV_TOKEN, host_id=INBOX_HOST, wait_s=INBOX_WAIT_S)
    async with host.connected() as call:
        start = await call(cursor, 0)
        posted = await stack.traffic.post_chat(*_sender(stack), text="dropped with its call")
        key = MessageKey(posted.chat_id, posted.message_id)
        dropped = await call(start.cursor, INBOX_WAIT_S)  # its result never reaches the model
        assert key in dropped.keys, "the posted message in the call that is dropped"
        returned_at = time.perf_counter()
        again = await call(start.cursor, INBOX_WAIT_S)
        seconds = time.perf_counter() - returned_at
        after = await call(again.cursor, 0)
        waiting = asyncio.create_task(call(after.cursor, INBOX_WAIT_S))
        await asyncio.sleep(1.0)
        waiting.cancel()  # the host's tool timeout, while the call waits
        await asyncio.gather(waiting, return_exceptions=True)
        late = await stack.traffic.post_chat(*_sender(stack), text="posted after a cancelled wait")
        late_key = MessageKey(late.chat_id, late.message_id)
        next_call = await call(after.cursor, INBOX_WAIT_S)
    return {
        "redelivered_on": "the next call" if key in again.keys else "a later call",
        "copies_in_the_next_call": again.keys.count(key),
        "acknowledged_after": key not in after.keys,
        "seconds_from_the_dropped_result": round(seconds, 3),
        "after_a_cancelled_wait": "the next call" if late_key in next_call.keys else "lost",
    }


def _sender(stack: BridgeFleet) -> tuple[SeedUser, str]:
    chat_id, members = stack.chats()[0]
    sender = stack.seed.find_user(members[0])
    assert sender is not None
    return sender, chat_id


async def _at(session: BenchSession, replicas: int) -> dict[str, Any]:
    messages, idle_s = _sizes(session)
    workdir = session.scratch(f"{NAME}-{replicas}")
    async with (
        bridge_fleet(
            await session.azurite(), workdir / "fleet", replicas=replicas, chats=3, env=ENV
        ) as stack,
        httpx.AsyncClient(timeout=30) as http,
    ):
        push = await _push_phase(stack, http, workdir / "push", messages, idle_s)
        inbox = await _inbox_phase(stack, http, messages, idle_s)
        cancelled = await _cancelled(stack, inbox.pop("cursor"))
    over = {q: round(inbox["latency_ms"][q] - push["latency_ms"][q], 1) for q in ("p50", "p99")}
    graph_over = round(
        inbox["idle"]["graph_requests_per_hour"] - push["idle"]["graph_requests_per_hour"], 1
    )
    return {
        "replicas": replicas,
        "messages": messages,
        "idle_s": idle_s,
        "push": push,
        "inbox": inbox,
        "inbox_over_push_ms": over,
        "idle_graph_requests_per_hour_inbox_over_push": graph_over,
        "cancelled": cancelled,
    }


async def run(session: BenchSession) -> dict[str, Any]:
    targets = {
        "inbox_p99_over_push_ms": TARGET_P99_OVER_PUSH_MS,
        "blob_ops_per_message": TARGET_BLOB_OPS_PER_MESSAGE,
        "idle_graph_requests_per_hour": TARGET_IDLE_GRAPH_PER_HOUR,
        "cancelled_call_redelivered_on": "the next call",
    }
    return await at_one_and_three_replicas(session, NAME, _at, targets)


def markdown(result: dict[str, Any]) -> str:
    header = [
        "replicas",
        "push p50/p99 ms",
        "inbox p50/p99 ms",
        "inbox over push p50/p99 ms",
        "inbox delivery-path Blob ops/message (less clock-driven)",
        "all Blob ops/message",
        "idle Blob ops/h push → inbox",
        "idle Graph req/h push → inbox",
        "dropped result back on",
        "after a cancelled wait",
    ]
    rows = []
    for r in result["runs"]:
        p, i, c = r["push"], r["inbox"], r["cancelled"]
        rows.append(
            [
                r["replicas"],
                f"{p['latency_ms']['p50']:.0f} / {p['latency_ms']['p99']:.0f}",
                f"{i['latency_ms']['p50']:.0f} / {i['latency_ms']['p99']:.0f}",
                f"{r['inbox_over_push_ms']['p50']} / {r['inbox_over_push_ms']['p99']}",
                f"{i['delivery_path_blob_ops_per_message']} "
                f"({i['delivery_path_blob_ops_per_message_less_clock_driven']})",
                i["blob_ops_per_message"],
                f"{p['idle']['blob_ops_per_hour']:.0f} → {i['idle']['blob_ops_per_hour']:.0f}",
                f"{p['idle']['graph_requests_per_hour']:.0f} → "
                f"{i['idle']['graph_requests_per_hour']:.0f}",
                f"{c['redelivered_on']} ({c['seconds_from_the_dropped_result']} s)",
                c["after_a_cancelled_wait"],
            ]
        )
    note = (
        "Latency: from the post to the bridge's stdout (push) or to the call result holding it (inbox), "
        "one message at a time, change detection included. Blob ops per message: the delivery path's "
        "areas (the chats' cursors and the hosts' records) of every replica over the inbox window, the "
        "intent, the claim, the acknowledgement and the host's record reads; less clock-driven: less "
        "those areas' idle rate. Idle: the whole fleet with one host connected and nothing posted; "
        "both hosts make the fleet watch its chats, so the inbox's own Graph cost is the difference."
    )
    return "\n\n".join(
        [
            f"## The inbox beside pushes\n\n{machine_line(result)}",
            markdown_table(header, rows),
            note,
        ]
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return run_standalone(NAME, run, markdown, argv, __doc__ or NAME)


if __name__ == "__main__":
    main()

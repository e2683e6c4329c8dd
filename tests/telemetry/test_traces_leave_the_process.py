"""Traces leave the process (issue 26 item 5): three replica processes export OTLP/HTTP to a receiver
the test runs (ENTRABOT_OTLP_ENDPOINT, as an operator sets it), and a person's message shows as one
trace from the role that found it (the scanner, or the safety sweep, whichever hints first), through
the hint in the container, to another replica's cursor and Graph reads, its claim and its push."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from eventually import SLOW_POLL_S, SLOW_WAIT_S, eventually

from emulator.seed import ThrottleBudget, build_seed
from emulator.server import start_emulator
from service.devstack.azurite import Azurite
from service.devstack.channel_host import ChannelHost
from service.devstack.fleet import DEV_TOKEN, LocalFleet, ReplicaProcess
from service.devstack.traffic import HumanTraffic
from service.domain.conversation import TEAMS_CHATS
from service.ledger.fleet.leases import lease_key, parse_lease
from service.storage.blob import BlobBackend
from service.telemetry.metrics import StorageMetrics
from service.workers import chat_scan, chat_sweep
from tests.telemetry.otlp_receiver import OtlpReceiver, ReceivedSpan, otlp_receiver

pytestmark = [pytest.mark.azurite, pytest.mark.slow]

# The roles that write chat hints, and the span each writes them under.
ROLE_SPANS = {chat_scan.ROLE: "chat_scan.scan", chat_sweep.ROLE: "chat_sweep.page"}


@pytest.mark.timeout(240)
def test_a_message_is_one_trace_from_the_scan_through_the_hint_to_another_replicas_claim_and_push(
    azurite: Azurite, tmp_path: Path
) -> None:
    asyncio.run(_scenario(azurite, tmp_path))


async def _scenario(azurite: Azurite, tmp_path: Path) -> None:
    seed = build_seed(chats=1, throttle=ThrottleBudget(chat_messages_per_s=500, other_per_s=500))
    async with otlp_receiver() as receiver:
        with start_emulator(seed) as emulator:
            # Three: the scanner and the sweep leave at least one replica holding neither, the reader.
            fleet = LocalFleet(
                seed,
                tmp_path,
                replicas=3,
                azurite=azurite,
                emulator=emulator,
                extra_env={
                    "ENTRABOT_OTLP_ENDPOINT": receiver.base_url,
                    "OTEL_BSP_SCHEDULE_DELAY": "500",  # the SDK's batch exporter: every 0.5 s, not 5 s
                },
            )
            await asyncio.to_thread(fleet.start)
            try:
                await _message_traced(fleet, receiver)
            finally:
                await asyncio.to_thread(fleet.stop)


async def _message_traced(fleet: LocalFleet, receiver: OtlpReceiver) -> None:
    assert fleet.azurite is not None and fleet.emulator is not None
    [chat] = fleet.emulator.state.chats_of(fleet.seed.agent_user.id)
    store = BlobBackend.from_connection_string(
        fleet.azurite.connection_string, fleet.container, metrics=StorageMetrics()
    )
    try:
        holders: dict[str, str] = {}

        async def roles_held() -> bool:
            for role in ROLE_SPANS:
                text = await store.read_text(lease_key(role))
                if text is not None:
                    holders[role] = parse_lease(text).holder
            return holders.keys() == ROLE_SPANS.keys()

        await eventually(
            roles_held,
            "replicas hold the scanner and the sweep leases",
            timeout_s=SLOW_WAIT_S,
            poll_s=SLOW_POLL_S,
        )
        # The host connects to a replica holding neither: the hint crosses processes.
        reader = next(m for m in fleet.members if m.name not in holders.values())
        pushed = await _post_and_deliver(fleet, reader, store, chat.id)
    finally:
        await store.aclose()

    async def push_exported() -> bool:
        return _push_span(receiver, pushed) is not None

    await eventually(
        push_exported,
        "the push's span reaches the receiver",
        timeout_s=SLOW_WAIT_S,
        poll_s=SLOW_POLL_S,
    )
    push = _push_span(receiver, pushed)
    assert push is not None and push.replica == reader.name
    chain = receiver.ancestors(push)

    async def whole_trace_exported() -> bool:
        # The writer's spans end (and are exported) independently of the reader's.
        nonlocal chain
        chain = receiver.ancestors(push)
        return bool(chain) and chain[-1].name in ROLE_SPANS.values()

    await eventually(
        whole_trace_exported,
        f"the push's ancestors reach the scan or the sweep: {[(s.name, s.replica) for s in chain]}",
        timeout_s=SLOW_WAIT_S,
        poll_s=SLOW_POLL_S,
    )
    [hint] = [s for s in chain if s.name == "hints.add"]
    [writer_role] = [role for role, span in ROLE_SPANS.items() if span == chain[-1].name]
    assert hint.replica == chain[-1].replica == holders[writer_role] != push.replica
    [read] = [s for s in chain if s.name == "chat_poll.chat"]
    assert read.replica == reader.name and read.attributes["entrabot.chat_id"] == chat.id
    assert read.links, "the chat's read links the poll cycle that ran it"
    in_trace = receiver.trace(push.trace_id)
    below_read = [s for s in in_trace if read in receiver.ancestors(s)]
    names = {s.name for s in below_read}
    assert "ledger.claim_delivery" in names, names
    assert any(n.startswith("Graph GET") and n.endswith("chats/{id}/messages") for n in names), (
        names
    )
    assert any(n.startswith("blob.") for n in names), names
    # The writer's own Graph read of /me/chats (where it saw the message's preview) is in the trace.
    assert any(
        s.name.startswith("Graph GET") and "me/chats" in s.name and s.replica == hint.replica
        for s in in_trace
    ), {s.name for s in in_trace}


async def _post_and_deliver(
    fleet: LocalFleet, reader: ReplicaProcess, store: BlobBackend, chat_id: str
) -> str:
    """A person's message once the chat had its first sight, pushed to a host on ``reader``."""
    assert fleet.emulator is not None
    stop = asyncio.Event()
    host = ChannelHost("host", [reader.mcp_url], token=DEV_TOKEN)
    running = asyncio.create_task(host.run(stop))
    try:

        async def steady() -> bool:
            return (
                host.connected_to is not None
                and await store.read_text(TEAMS_CHATS.cursor_key(chat_id)) is not None
            )

        await eventually(
            steady,
            "the host is connected and the chat has its cursor",
            timeout_s=SLOW_WAIT_S,
            poll_s=SLOW_POLL_S,
        )
        async with httpx.AsyncClient(timeout=30) as http:
            posted = await HumanTraffic(fleet.seed, fleet.emulator.base_url, http).post_chat(
                fleet.seed.humans[0], chat_id, "a message to follow"
            )

        async def delivered() -> bool:
            return any(p.message_id == posted.message_id for p in host.pushes)

        await eventually(
            delivered, "the message is pushed", timeout_s=SLOW_WAIT_S, poll_s=SLOW_POLL_S
        )
        return posted.message_id
    finally:
        stop.set()
        await asyncio.wait_for(running, 15)


def _push_span(receiver: OtlpReceiver, message_id: str) -> ReceivedSpan | None:
    return next(
        (
            s
            for s in receiver.spans
            if s.name == "delivery.push" and s.attributes.get("entrabot.message_id") == message_id
        ),
        None,
    )

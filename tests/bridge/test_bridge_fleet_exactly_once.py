"""The fleet's promise through bridges and an inbox: every message people send reaches exactly one host
once, through a SIGKILL and a SIGTERM of replicas, a dropped stream and a bridge restarted mid-run
(issues 22 and 35).

Three replica processes (Azurite, the Graph emulator) behind the loopback balancer; two channel bridges
with ``--push``, each a host of its own, whose hosts (the MCP Python SDK's stdio client) record what they
read; and a host without pushes draining the inbox through the balancer (tests/support/inbox_host.py),
which records what its calls returned. Chat and mail traffic. The account has no "lost at SIGKILL"
allowance: nothing may be missing.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
from inbox_host import InboxLoop

from service.bridge.config import HOST_ID_ENV
from service.bridge.written_log import STATE_DIR_ENV
from service.clock import parse_timestamp
from service.devstack.azurite import Azurite
from service.devstack.delivery_account import SentMessage
from service.devstack.fleet import DEV_TOKEN
from service.domain.message import EMAIL_CHAT_ID, MessageKey
from tests.bridge.bridge_host import Received, bridge_host
from tests.bridge.fleet_stack import BridgeFleet, bridge_fleet
from tests.mcp.server_fixture import eventually

pytestmark = [pytest.mark.slow, pytest.mark.fleet, pytest.mark.azurite]

CHAT_MESSAGES = 48
MAILS = 6
TRAFFIC_S = 24.0
DELIVERY_WAIT_S = 90.0


def _keys(*hosts: Received) -> list[tuple[str, str]]:
    return [
        (str(p["meta"]["chat_id"]), str(p["meta"]["message_id"])) for r in hosts for p in r.channel
    ]


async def _traffic(stack: BridgeFleet, sent: list[SentMessage], rng: random.Random) -> None:
    chats = stack.chats()
    agent = stack.seed.agent_user.user_principal_name
    total = CHAT_MESSAGES + MAILS
    for i in range(total):
        if (i + 1) * MAILS // total > i * MAILS // total:
            human = rng.choice(list(stack.seed.humans))
            await stack.traffic.send_mail(human, agent, f"Invoice {i}", f"Please pay invoice {i}.")
        else:
            chat_id, members = rng.choice(chats)
            sender = stack.seed.find_user(rng.choice(members))
            assert sender is not None
            posted = await stack.traffic.post_chat(sender, chat_id, f"ship it {i}")
            sent.append(
                SentMessage(posted.chat_id, posted.message_id, parse_timestamp(posted.created))
            )
        await asyncio.sleep(TRAFFIC_S / total * rng.uniform(0.5, 1.5))


@pytest.mark.timeout(420)
async def test_every_message_reaches_one_host_once_through_kills_drops_and_a_bridge_restart(
    azurite: Azurite, tmp_path: Path
) -> None:
    rng = random.Random(22)
    env = {
        "ENTRABOT_CHAT_POLL_INTERVAL_S": "1.0",
        "ENTRABOT_CHAT_POLL_JITTER_S": "0.2",
        "ENTRABOT_EMAIL_POLL_INTERVAL_S": "3.0",
        "ENTRABOT_DELIVERY_REDELIVER_AFTER_S": "3",
    }
    host_b = {HOST_ID_ENV: "host-b", STATE_DIR_ENV: str(tmp_path / "host-b-state")}
    async with bridge_fleet(azurite, tmp_path / "fleet", replicas=3, chats=4, env=env) as stack:
        async with AsyncExitStack() as bridges:
            _, host_a = await bridges.enter_async_context(
                bridge_host(
                    stack.balancer.url(),
                    tmp_path / "a.log",
                    token=DEV_TOKEN,
                    env={HOST_ID_ENV: "host-a", STATE_DIR_ENV: str(tmp_path / "host-a-state")},
                )
            )
            b_first = AsyncExitStack()
            _, host_b1 = await b_first.enter_async_context(
                bridge_host(stack.balancer.url(), tmp_path / "b.log", token=DEV_TOKEN, env=host_b)
            )
            host_c = InboxLoop(stack.balancer.url, DEV_TOKEN, host_id="host-c")
            inbox_task = asyncio.create_task(host_c.run())
            await stack.wait_bootstrapped()
            await eventually(lambda: stack.balancer.connections, "the bridges' sessions")
            await eventually(lambda: host_c.calls > 0, "the inbox host's first call")

            sent: list[SentMessage] = []
            traffic = asyncio.create_task(_traffic(stack, sent, rng))
            events: list[str] = []

            def holder() -> int:
                assert stack.balancer.last is not None
                return stack.balancer.last[1]

            await asyncio.sleep(rng.uniform(4, 6))
            killed = next(m for m in stack.fleet.members if m.port == holder())
            killed.kill()  # SIGKILL of the replica holding the sessions, with claims in flight
            events.append(f"SIGKILL {killed.name}")
            await asyncio.sleep(rng.uniform(3, 5))
            stack.balancer.cut()  # every stream drops; the bridges resume or open new sessions
            events.append("streams cut")
            await asyncio.sleep(rng.uniform(2, 4))
            await b_first.aclose()  # Claude Code restarts the stdio server of host B
            _, host_b2 = await bridges.enter_async_context(
                bridge_host(stack.balancer.url(), tmp_path / "b2.log", token=DEV_TOKEN, env=host_b)
            )
            events.append("bridge B restarted")
            await asyncio.sleep(rng.uniform(2, 4))
            termed = next(m for m in stack.fleet.members if m.alive and m.port == holder())
            await asyncio.to_thread(termed.terminate)  # SIGTERM: a rolling update's step
            events.append(f"SIGTERM {termed.name}")
            killed.start()
            await asyncio.to_thread(killed.wait_ready)
            await traffic

            inbox = (
                stack.fleet.emulator.state.mailbox(stack.seed.agent_user.id, "inbox")
                if stack.fleet.emulator
                else []
            )
            sent += [SentMessage(EMAIL_CHAT_ID, mail.id, mail.received) for mail in inbox]
            expected = {m.key for m in sent}

            def missing() -> set[MessageKey]:
                return expected - set(_keys(host_a, host_b1, host_b2)) - set(host_c.received)

            await eventually(
                lambda: not missing(),
                "every message on some host's stdin",
                timeout_s=DELIVERY_WAIT_S,
            )
            await asyncio.sleep(5)  # a late redelivery would show now
            host_c.stop()
            inbox_task.cancel()
            await asyncio.gather(inbox_task, return_exceptions=True)
            counts = Counter(_keys(host_a, host_b1, host_b2)) + host_c.counts()
            duplicates = {k: n for k, n in counts.items() if n > 1}
            print(
                f"\n{'; '.join(events)}: sent {len(sent)} ({len(inbox)} mails), host A {len(host_a.channel)}, "
                f"host B {len(host_b1.channel)} + {len(host_b2.channel)} after its restart, "
                f"inbox host C {len(host_c.received)} in {host_c.calls} calls "
                f"({host_c.failures} reconnects), "
                f"duplicates {len(duplicates)}, missing {len(missing())}"
            )
            assert len(inbox) == MAILS
            assert not duplicates, duplicates
            assert set(counts) == expected, set(counts) ^ expected

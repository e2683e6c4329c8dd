"""What people write in watched chats before any host has connected reaches the first hosts, once, all
of it, within the age bound (issue 35, item 5: measured with a real host, all but each chat's newest
message was lost, because a chat's cursor started only at a reader's first sight, which waits for a host).

Three replica processes on one Azurite container and the Graph emulator over HTTP boot with no host. The
fleet watches the seeded chats and starts their cursors (one of them holds a three-day-old message: its
history). People post through Graph; a message injected as 30 hours old stands for one written while
the fleet waited longer than ``ENTRABOT_CHAT_MAX_AGE_H`` (24 h) for a host; a chat created after the
first boot gets its opening message and two more. Chat cycles pass with nobody to deliver to, so nothing
is claimed. Then two push hosts connect over MCP to two different replicas: every fresh message reaches
exactly one of them once; the history and the stale message never do.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest
from eventually import SLOW_POLL_S, SLOW_WAIT_S, eventually

from emulator.seed import ThrottleBudget, build_seed
from emulator.server import RunningEmulator, start_emulator
from service.devstack.azurite import Azurite
from service.devstack.channel_host import ChannelHost
from service.devstack.fleet import DEV_TOKEN, LocalFleet
from service.devstack.traffic import HumanTraffic
from service.domain.conversation import TEAMS_CHATS
from service.storage.blob import BlobBackend
from service.telemetry.metrics import StorageMetrics

pytestmark = [pytest.mark.azurite, pytest.mark.slow]

CHAT_CYCLES = 'entrabot_loop_cycles_total{loop="chat_poll",outcome="ok"}'
Key = tuple[str, str]  # (chat id, message id): a message id is unique within its chat only


@pytest.fixture(scope="module")
def emulator() -> Iterator[RunningEmulator]:
    with start_emulator(build_seed(chats=2, throttle=ThrottleBudget.relaxed())) as running:
        yield running


@pytest.fixture
def fleet(azurite: Azurite, emulator: RunningEmulator, tmp_path: Path) -> Iterator[LocalFleet]:
    seed = emulator.seed
    group = seed.chats[1].id
    assert group is not None
    # The group chat's history, from before the fleet existed.
    emulator.state.post_message(
        group,
        sender_id=seed.humans[1].id,
        content="before the fleet",
        created=datetime.now(timezone.utc) - timedelta(days=3),
    )
    started = LocalFleet(seed, tmp_path / "fleet", replicas=3, azurite=azurite, emulator=emulator)
    started.start()
    yield started
    for member in started.members:
        member.terminate()


async def chat_cycles(fleet: LocalFleet) -> list[float]:
    counts = []
    async with httpx.AsyncClient(timeout=10) as http:
        for member in fleet.members:
            text = (await http.get(f"{member.base_url}/metrics")).text
            samples = [
                float(line.split()[-1])
                for line in text.splitlines()
                if line.startswith(CHAT_CYCLES + " ")
            ]
            counts.append(samples[0] if samples else 0.0)
    return counts


async def until_every_replica_ran_more_chat_cycles(fleet: LocalFleet, more: int) -> None:
    start = await chat_cycles(fleet)

    async def all_ran() -> bool:
        return all(now >= then + more for now, then in zip(await chat_cycles(fleet), start))

    await eventually(all_ran, f"{more} more chat cycles on every replica", timeout_s=SLOW_WAIT_S)


async def test_chat_messages_written_before_any_host_reach_the_first_hosts_once(
    fleet: LocalFleet, emulator: RunningEmulator, azurite: Azurite
) -> None:
    seed = emulator.seed
    one_on_one, group = seed.chats[0].id, seed.chats[1].id
    assert one_on_one is not None and group is not None
    ada, grace = seed.humans[0], seed.humans[1]
    store = BlobBackend.from_connection_string(
        azurite.connection_string, fleet.container, metrics=StorageMetrics()
    )
    stop = asyncio.Event()
    hosts = [
        ChannelHost(f"host-{i}", [member.mcp_url], token=DEV_TOKEN)
        for i, member in enumerate(fleet.members[:2])
    ]
    tasks: list[asyncio.Task[None]] = []

    async def cursor(chat_id: str) -> str | None:
        return await store.read_text(TEAMS_CHATS.cursor_key(chat_id))

    try:
        # The container's first boot watches the chats and starts their cursors, with no host.
        async def both_started() -> bool:
            return all([await cursor(one_on_one), await cursor(group)])

        await eventually(both_started, "the seeded chats' cursors", timeout_s=SLOW_WAIT_S)
        async with httpx.AsyncClient(timeout=30) as http:
            traffic = HumanTraffic(seed, emulator.base_url, http)
            fresh: list[Key] = []
            for i in range(3):
                for user, chat_id in ((ada, one_on_one), (grace, group)):
                    posted = await traffic.post_chat(user, chat_id, f"nobody is listening {i}")
                    fresh.append((chat_id, posted.message_id))
            stale = emulator.state.post_message(
                group,
                sender_id=ada.id,
                content="written while the fleet waited too long for a host",
                created=datetime.now(timezone.utc) - timedelta(hours=30),
            )
            # A chat that appears after the first boot, started by a message.
            later, _ = emulator.state.create_chat(
                "group", [seed.agent_user.id, ada.id, grace.id], topic="after the first boot"
            )
            opening = await traffic.post_chat(ada, later.id, "a new chat for the agent")
            fresh.append((later.id, opening.message_id))
            await eventually(
                lambda: cursor(later.id), "the new chat's cursor", timeout_s=SLOW_WAIT_S
            )
            for i in range(2):
                posted = await traffic.post_chat(grace, later.id, f"and then {i}")
                fresh.append((later.id, posted.message_id))

        # No delivery target: however many cycles pass, nothing is claimed.
        before = {c: await cursor(c) for c in (one_on_one, group, later.id)}
        await until_every_replica_ran_more_chat_cycles(fleet, 10)
        assert {c: await cursor(c) for c in before} == before

        tasks = [asyncio.create_task(host.run(stop)) for host in hosts]
        await eventually(
            lambda: all(h.connected_to for h in hosts),
            "both hosts connected",
            timeout_s=SLOW_WAIT_S,
        )

        def pushed() -> Counter[Key]:
            return Counter((p.chat_id, p.message_id) for h in hosts for p in h.pushes)

        await eventually(
            lambda: set(fresh) <= set(pushed()),
            "every message written before the hosts came",
            timeout_s=SLOW_WAIT_S,
            poll_s=SLOW_POLL_S,
        )
        await until_every_replica_ran_more_chat_cycles(fleet, 10)  # time for any second delivery
        # Nothing else: not the history (three days old), not the stale message.
        assert pushed() == Counter({key: 1 for key in fresh})
        assert (group, stale.id) not in pushed()
    finally:
        stop.set()
        await asyncio.gather(*tasks)
        await store.aclose()

"""Mail that arrives between the container's first boot and the first host reaches that host, once
(issue 24, item 9; the seed: the email cursor starts "on a container's first boot").

Three replica processes on one Azurite container and the Graph emulator over HTTP boot with no host.
A human mails the agent through Graph; several email cycles pass with nobody to deliver to, so nothing
is claimed. Then two push hosts connect over MCP to two different replicas: the mail reaches them,
each mail exactly once across the fleet.
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
from service.ledger.claims.email_cursor import EMAIL_CURSOR_KEY, parse_email_cursor
from service.storage.blob import BlobBackend
from service.telemetry.metrics import StorageMetrics

pytestmark = [pytest.mark.azurite, pytest.mark.slow]

MAILS = 3
EMAIL_CYCLES = 'entrabot_loop_cycles_total{loop="email_poll",outcome="ok"}'


@pytest.fixture(scope="module")
def emulator() -> Iterator[RunningEmulator]:
    with start_emulator(build_seed(chats=1, throttle=ThrottleBudget.relaxed())) as running:
        yield running


@pytest.fixture
def fleet(azurite: Azurite, emulator: RunningEmulator, tmp_path: Path) -> Iterator[LocalFleet]:
    started = LocalFleet(
        emulator.seed,
        tmp_path / "fleet",
        replicas=3,
        azurite=azurite,
        emulator=emulator,
        extra_env={"ENTRABOT_EMAIL_POLL_INTERVAL_S": "1"},
    )
    started.start()
    yield started
    for member in started.members:
        member.terminate()


async def email_cycles(fleet: LocalFleet) -> list[float]:
    """Each replica's finished email-poll cycles, from its /metrics."""
    counts = []
    async with httpx.AsyncClient(timeout=10) as http:
        for member in fleet.members:
            text = (await http.get(f"{member.base_url}/metrics")).text
            samples = [
                float(line.split()[-1])
                for line in text.splitlines()
                if line.startswith(EMAIL_CYCLES + " ")
            ]
            counts.append(samples[0] if samples else 0.0)
    return counts


async def until_every_replica_ran_more_email_cycles(fleet: LocalFleet, more: int) -> None:
    start = await email_cycles(fleet)

    async def all_ran() -> bool:
        return all(now >= then + more for now, then in zip(await email_cycles(fleet), start))

    await eventually(
        all_ran,
        f"{more} more email cycles on every replica",
        timeout_s=SLOW_WAIT_S,
        poll_s=SLOW_POLL_S,
    )


async def test_mail_sent_before_any_host_connected_reaches_the_first_hosts_once(
    fleet: LocalFleet, emulator: RunningEmulator, azurite: Azurite
) -> None:
    store = BlobBackend.from_connection_string(
        azurite.connection_string, fleet.container, metrics=StorageMetrics()
    )
    stop = asyncio.Event()
    hosts = [
        ChannelHost(f"host-{i}", [member.mcp_url], token=DEV_TOKEN)
        for i, member in enumerate(fleet.members[:2])
    ]
    tasks: list[asyncio.Task[None]] = []
    try:
        # The container's first boot starts the cursor, with no host anywhere.
        booted = await eventually(
            lambda: store.read_text(EMAIL_CURSOR_KEY),
            "the email cursor, created at boot",
            timeout_s=SLOW_WAIT_S,
            poll_s=SLOW_POLL_S,
        )
        boot = parse_email_cursor(booted).ts
        # Graph stamps mail to the whole second: mail of the boot's own second may count as older.
        await eventually(
            lambda: (
                datetime.now(timezone.utc) >= boot.replace(microsecond=0) + timedelta(seconds=1)
            ),
            "the second after the boot",
        )
        subjects = [f"before any host {i}" for i in range(MAILS)]
        async with httpx.AsyncClient(timeout=30) as http:
            traffic = HumanTraffic(emulator.seed, emulator.base_url, http)
            for subject in subjects:
                await traffic.send_mail(
                    emulator.seed.humans[0],
                    emulator.seed.agent_user.user_principal_name,
                    subject,
                    "sent while no host is connected",
                )
        inbox = emulator.state.mailbox(emulator.seed.agent_user.id)
        sent = {m.id for m in inbox if m.subject in subjects}
        assert len(sent) == MAILS
        assert all(m.received > boot for m in inbox if m.id in sent)

        # No delivery target: however many cycles pass, nobody claims.
        await until_every_replica_ran_more_email_cycles(fleet, 3)
        assert await store.read_text(EMAIL_CURSOR_KEY) == booted

        tasks = [asyncio.create_task(host.run(stop)) for host in hosts]
        await eventually(
            lambda: all(h.connected_to for h in hosts),
            "both hosts connected",
            timeout_s=SLOW_WAIT_S,
        )

        def pushed() -> Counter[str]:
            return Counter(p.message_id for h in hosts for p in h.pushes if p.message_id in sent)

        await eventually(
            lambda: set(pushed()) == sent,
            "every mail pushed",
            timeout_s=SLOW_WAIT_S,
            poll_s=SLOW_POLL_S,
        )
        await until_every_replica_ran_more_email_cycles(
            fleet, 3
        )  # any second delivery would have happened by now
        assert pushed() == Counter({message_id: 1 for message_id in sent})
    finally:
        stop.set()
        await asyncio.gather(*tasks)
        await store.aclose()

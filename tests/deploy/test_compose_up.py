"""docker-compose.yml up for real: Azurite, azurite-init, the Graph emulator and three replicas, from
images built here; people's messages posted through the emulator reach the hosts once each; then the
replicas stop cleanly and `down` leaves nothing behind.

The services and their settings are the file's; an override names the locally built images (the
fleet's, as the image test builds it, and the pinned npm Azurite's from azurite/Dockerfile: no registry
is reachable to pull Microsoft's), and the FLEET_*_PORT variables put every published port on a free
loopback port. Prometheus and Grafana are not started: their images come only from a registry
(tests/deploy/test_live_prometheus.py runs Debian's Prometheus on the same configuration instead).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from azure.storage.blob import BlobServiceClient
from eventually import SLOW_POLL_S, SLOW_WAIT_S, eventually

from emulator.seed import Seed, demo_seed_path, load_seed
from service.clock import parse_timestamp, utc_now
from service.devstack.azurite import Azurite
from service.devstack.channel_host import ChannelHost
from service.devstack.delivery_account import SentMessage, account_deliveries
from service.devstack.ledger_reader import LedgerReader
from service.devstack.traffic import HumanTraffic
from service.domain.message import MessageKey
from service.storage.blob import BlobBackend
from service.telemetry.metrics import StorageMetrics
from tests.deploy.compose_project import ComposeProject, ComposeUnavailable, compose_command
from tests.deploy.deploy_facts import load_compose_file
from tests.deploy.docker_engine import SOCKET, Engine

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900), pytest.mark.xdist_group("docker")]

REPLICAS = ("replica-1", "replica-2", "replica-3")
SERVICES = ("azurite", "azurite-init", "emulator", *REPLICAS)
PORT_VARIABLES = {
    "azurite": "FLEET_AZURITE_PORT",
    "emulator": "FLEET_EMULATOR_PORT",
    **{replica: f"FLEET_REPLICA_{replica[-1]}_PORT" for replica in REPLICAS},
}
MESSAGES_PER_CHAT = 2
# Three replica processes start at once on a loaded two-core machine: ~25 s seen.
REPLICAS_READY_WITHIN_S = 120.0


@pytest.fixture(scope="module")
def compose_file() -> dict[str, Any]:
    return load_compose_file()


@pytest.fixture(scope="module")
def project(
    engine: Engine, fleet_image: str, azurite_image: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ComposeProject]:
    try:
        compose_command()
    except ComposeUnavailable as exc:
        pytest.skip(str(exc))
    images = {"azurite": azurite_image, **{s: fleet_image for s in SERVICES if s != "azurite"}}
    instance = ComposeProject(
        engine.client,
        f"unix://{SOCKET}",
        images,
        tmp_path_factory.mktemp("compose"),
        tuple(PORT_VARIABLES.values()),
    )
    try:
        instance.up(SERVICES)
        yield instance
    finally:
        instance.remove()


def url_of(project: ComposeProject, service: str) -> str:
    return f"http://127.0.0.1:{project.ports[PORT_VARIABLES[service]]}"


def published_azurite(project: ComposeProject) -> Azurite:
    return Azurite(f"{url_of(project, 'azurite')}/devstoreaccount1", "compose")


def test_azurite_init_creates_the_shared_container_and_exits(
    project: ComposeProject, compose_file: dict[str, Any]
) -> None:
    [init] = project.containers("azurite-init")
    state = init.attrs["State"]
    assert (state["Status"], state["ExitCode"]) == ("exited", 0), project.logs()
    wanted = compose_file["services"]["azurite-init"]["environment"]["ENTRABOT_BLOB_CONTAINER"]
    blob = BlobServiceClient.from_connection_string(published_azurite(project).connection_string)
    assert blob.get_container_client(wanted).exists(), f"azurite-init did not create {wanted!r}"


async def test_each_message_posted_reaches_a_host_once(
    project: ComposeProject, compose_file: dict[str, Any]
) -> None:
    replica_env = compose_file["services"]["replica-1"]["environment"]
    token = replica_env["ENTRABOT_MCP_STATIC_TOKENS"]
    seed = load_seed(demo_seed_path())
    await _replicas_ready(project)
    # One host per replica, each falling back to the next: a message is claimed by whichever
    # replica reads its chat first, and must reach exactly one host.
    urls = [f"{url_of(project, r)}/mcp" for r in REPLICAS]
    hosts = [
        ChannelHost(f"host-{i + 1}", urls[i:] + urls[:i], token=token) for i in range(len(urls))
    ]
    ledger = LedgerReader(
        BlobBackend.from_connection_string(
            published_azurite(project).connection_string,
            replica_env["ENTRABOT_BLOB_CONTAINER"],
            metrics=StorageMetrics(),
        )
    )
    stop = asyncio.Event()
    tasks = [asyncio.create_task(host.run(stop)) for host in hosts]
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            traffic = HumanTraffic(seed, url_of(project, "emulator"), http)
            chats = await _watched_chats(hosts, ledger, seed)
            began = utc_now()
            sent = await _post(traffic, seed, chats)

            def received() -> list[tuple[str, str]]:
                return [(p.chat_id, p.message_id) for h in hosts for p in h.pushes]

            await eventually(
                lambda: {m.key for m in sent} <= set(received()),
                f"every message at a host: sent {[m.key for m in sent]}, received {received()}",
                timeout_s=SLOW_WAIT_S,
                poll_s=SLOW_POLL_S,
            )

            async def recorded() -> dict[MessageKey, list[tuple[str, str]]] | None:
                found = await ledger.interactions()
                return found if all(m.key in found for m in sent) else None

            interactions = await eventually(
                recorded,
                "every delivery in the interaction log",
                timeout_s=SLOW_WAIT_S,
                poll_s=SLOW_POLL_S,
            )
            snapshot = await ledger.snapshot()
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await ledger.aclose()
    account = account_deliveries(sent, received(), (), in_flight_window=timedelta(0))
    assert not account.duplicates, f"delivered more than once: {dict(account.duplicates)}"
    assert not account.unexplained, f"never delivered: {account.unexplained}"
    # Anything else pushed is the seed's own newest message of a chat, surfacing on first sight.
    others = [
        p for h in hosts for p in h.pushes if (p.chat_id, p.message_id) in set(account.unexpected)
    ]
    assert all(parse_timestamp(p.ts) < began for p in others), (
        f"pushed, never sent: {[(p.chat_id, p.message_id, p.ts) for p in others]}"
    )  # not their bodies
    for message in sent:
        assert snapshot.records_claim(message), f"{message.key} is not claimed in the shared ledger"
        records = interactions[message.key]  # (replica, action): a second claim would add one
        assert len(records) == 1 and records[0][0] in REPLICAS and records[0][1] == "delivered", (
            message.key,
            records,
        )


def test_replicas_stop_cleanly_and_down_leaves_nothing(project: ComposeProject) -> None:
    """Last in this module: it takes the project down."""
    project.stop()
    for replica in REPLICAS:
        [container] = project.containers(replica)
        state = container.attrs["State"]
        # 137 would be Compose's SIGKILL at the end of stop_grace_period.
        assert (state["ExitCode"], state["OOMKilled"]) == (0, False), project.logs()
    project.down()
    assert project.leftovers() == {"containers": [], "networks": [], "volumes": []}


async def _replicas_ready(project: ComposeProject) -> None:
    async with httpx.AsyncClient(timeout=5) as http:

        async def all_ready() -> bool:
            for replica in REPLICAS:
                try:
                    if (await http.get(f"{url_of(project, replica)}/readyz")).status_code != 200:
                        return False
                except httpx.TransportError:
                    return False
            return True

        try:
            await eventually(
                all_ready,
                "every replica's /readyz",
                timeout_s=REPLICAS_READY_WITHIN_S,
                poll_s=SLOW_POLL_S,
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{project.logs()}") from None


async def _watched_chats(hosts: list[ChannelHost], ledger: LedgerReader, seed: Seed) -> list[str]:
    """Once every host is connected and each of the agent's chats has its cursor (a message sent
    before then would meet the first-sight rule, where only a chat's newest surfaces)."""
    agent = seed.agent_user
    expected = sum(
        1 for chat in seed.chats if {agent.id, agent.user_principal_name} & set(chat.members)
    )

    async def ready() -> list[str] | None:
        if not all(h.connected_to for h in hosts):
            return None
        cursors = list((await ledger.snapshot()).chat_cursors)
        return cursors if len(cursors) >= expected else None

    chats: list[str] = await eventually(
        ready,
        f"hosts connected and {expected} chat cursors",
        timeout_s=SLOW_WAIT_S,
        poll_s=SLOW_POLL_S,
    )
    return chats


async def _post(traffic: HumanTraffic, seed: Seed, chats: list[str]) -> list[SentMessage]:
    """MESSAGES_PER_CHAT messages into each chat, each from a person in it, through Graph."""
    member_of = {human.id: set(await traffic.chat_ids(human)) for human in seed.humans}
    sent: list[SentMessage] = []
    for chat_id in chats:
        sender = next(h for h in seed.humans if chat_id in member_of[h.id])
        for n in range(MESSAGES_PER_CHAT):
            posted = await traffic.post_chat(sender, chat_id, f"compose test message {n + 1}")
            sent.append(SentMessage(chat_id, posted.message_id, parse_timestamp(posted.created)))
    return sent

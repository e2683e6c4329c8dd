"""Issue 23 item 8: one Graph read of a chat per change for the whole fleet, not one per replica.

Three replicas are worker stacks on one store (LocalBackend) and the emulator over real HTTP, each
with a push host. Graph's change notifications reach them as Graph sends them: a POST of the
notification batch to the webhook receiver, served by uvicorn, which writes the hints every replica
reads. What the fleet asked Graph is counted at the emulator.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from settings_env import ROOMY_BUDGET
from starlette.applications import Starlette
from worker_stack import RecordingTarget, WorkerStack, build_stack

from emulator.seed import build_seed
from emulator.server import RunningEmulator, start_emulator
from service.devstack.uvicorn_runner import serve_app
from service.ledger.fleet.hints import HintLog
from service.notifications.receiver import NOTIFICATIONS_PATH, NotificationReceiver
from service.storage.local import LocalBackend
from service.telemetry.metrics import ChangeMetrics

CLIENT_STATE = "fleet-client-state"
REPLICAS = 3
CYCLES_PER_CHANGE = (
    3  # enough for every replica to take the hint and for a later turn to look again
)
CHAT_READ_ROUTE = "/v1.0/chats/{id}/messages"


@pytest.fixture
def emulator() -> Iterator[RunningEmulator]:
    with start_emulator(build_seed(chats=2, throttle=ROOMY_BUDGET)) as running:
        yield running


@pytest.fixture
async def fleet(emulator: RunningEmulator, tmp_path: Path) -> AsyncIterator[list[WorkerStack]]:
    store = LocalBackend(tmp_path / "state")
    stacks = [
        await build_stack(emulator, store, is_cloud=False, replica_id=f"replica-{n}")
        for n in range(REPLICAS)
    ]
    for n, stack in enumerate(stacks):
        stack.hub.register(RecordingTarget(target_id=f"host-{n}"))
    yield stacks
    for stack in stacks:
        await stack.aclose()


@pytest.fixture
async def webhook(fleet: list[WorkerStack]) -> AsyncIterator[httpx.AsyncClient]:
    receiver = NotificationReceiver(
        HintLog(fleet[0].backend), CLIENT_STATE, metrics=ChangeMetrics()
    )
    async with (
        serve_app(Starlette(routes=receiver.routes())) as server,
        httpx.AsyncClient(base_url=server.base_url, timeout=10) as client,
    ):
        yield client


def chat_reads(emulator: RunningEmulator) -> int:
    return sum(1 for r in emulator.stats.snapshot()["recent"] if r["route"] == CHAT_READ_ROUTE)


async def notify(
    webhook: httpx.AsyncClient, change_type: str, chat_id: str, message_id: str
) -> None:
    """What Graph POSTs for a change of one chat message (read, not run: "Get change notifications for
    messages in Teams channels and chats"; a reaction or an edit arrives as ``updated``)."""
    item: dict[str, Any] = {
        "subscriptionId": "s1",
        "changeType": change_type,
        "clientState": CLIENT_STATE,
        "tenantId": "t",
        "resource": f"chats('{chat_id}')/messages('{message_id}')",
        "resourceData": {"id": message_id, "@odata.type": "#Microsoft.Graph.chatMessage"},
    }
    assert (await webhook.post(NOTIFICATIONS_PATH, json={"value": [item]})).status_code == 202


async def cycles(stacks: list[WorkerStack], count: int = CYCLES_PER_CHANGE) -> None:
    for _ in range(count):
        for stack in stacks:
            await stack.chats.cycle()


def delivered(stacks: list[WorkerStack]) -> list[str]:
    return [
        m.message_id
        for s in stacks
        for t in s.hub.live_targets()
        if isinstance(t, RecordingTarget)
        for m in t.received
    ]


async def test_a_message_the_agents_reply_and_a_reaction_cost_the_fleet_about_one_chat_read_each(
    fleet: list[WorkerStack], webhook: httpx.AsyncClient, emulator: RunningEmulator
) -> None:
    await cycles(fleet, 2)  # first sights, then steady
    chat = emulator.seed.chats[0].id
    assert chat is not None
    person, agent = emulator.seed.humans[0].id, emulator.seed.agent_user.id
    emulator.stats.reset()

    asked = emulator.state.post_message(
        chat, sender_id=person, content="can you check the invoice?"
    )
    await notify(webhook, "created", chat, asked.id)
    await cycles(fleet)
    after_question = chat_reads(emulator)

    reply = emulator.state.post_message(chat, sender_id=agent, content="checked: it is paid")
    await notify(webhook, "created", chat, reply.id)
    await cycles(fleet)
    after_reply = chat_reads(emulator)

    emulator.state.react_to_message(chat, reply.id, person, "like")
    await notify(webhook, "updated", chat, reply.id)
    await cycles(fleet)
    after_reaction = chat_reads(emulator)

    assert delivered(fleet) == [asked.id]  # the person's message, once, to one host
    assert after_question == 1
    assert after_reply - after_question == 1  # the replica that read it records it for the fleet
    assert after_reaction - after_reply == 0  # an update can never bring a new message

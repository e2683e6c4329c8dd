"""Discovery reads the agent identity's sponsors as Graph allows it: the list with the agent identity's
app-only token (Graph refuses a delegated one), each sponsor's profile with the agent user's token.
The emulator over real HTTP; the store is a LocalBackend."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from worker_stack import WorkerStack, build_stack

from emulator.seed import ThrottleBudget, build_seed
from emulator.server import RunningEmulator, start_emulator
from service.delivery.sponsors import SponsorGate
from service.graph.models import ChatMember
from service.storage.local import LocalBackend

SPONSORS_ROUTE = "/v1.0/servicePrincipals/{id}/microsoft.graph.agentIdentity/sponsors"


@pytest.fixture
def emulator() -> Iterator[RunningEmulator]:
    with start_emulator(build_seed(chats=2, throttle=ThrottleBudget.relaxed())) as running:
        yield running


@pytest.fixture
async def stack(emulator: RunningEmulator, tmp_path: Path) -> AsyncIterator[WorkerStack]:
    built = await build_stack(emulator, LocalBackend(tmp_path / "state"), is_cloud=False)
    yield built
    await built.aclose()


async def test_sponsors_are_listed_with_the_agent_identitys_app_only_token(
        stack: WorkerStack, emulator: RunningEmulator) -> None:
    await stack.discovery.cycle()
    ada = emulator.seed.sponsors[0]
    assert stack.discovery.gate.sponsor_ids == {ada.id}
    (read,) = [r for r in emulator.stats.recent() if r.route == SPONSORS_ROUTE]
    assert (read.status, read.app_id, read.user_id) == (200, emulator.seed.agent_identity.id, None)


async def test_a_sponsors_profile_is_read_so_their_other_account_is_recognised(
        stack: WorkerStack, emulator: RunningEmulator) -> None:
    await stack.discovery.cycle()
    ada = emulator.seed.sponsors[0]
    gate: SponsorGate = stack.discovery.gate
    # Ada posting as a guest account under her own address: known only from her profile's UPN.
    guest = ChatMember.model_validate({"id": "m1", "userId": "guest-object-id", "email": ada.user_principal_name,
                                    "tenantId": emulator.seed.tenant_id})
    gate.refresh_chat("chat-x", [guest])
    assert gate.is_sponsor("guest-object-id", "chat-x")


async def test_without_the_app_only_client_no_sponsor_is_recognised(
        stack: WorkerStack, emulator: RunningEmulator) -> None:
    stack.discovery.directory = None
    await stack.discovery.cycle()
    assert stack.discovery.gate.sponsor_ids == frozenset()
    assert not [r for r in emulator.stats.recent() if r.route == SPONSORS_ROUTE]


async def test_a_delegated_sponsor_read_is_refused_and_recognises_nobody(
        stack: WorkerStack, emulator: RunningEmulator) -> None:
    # What the service did before: list sponsors with the agent user's token. Graph answers 403.
    stack.discovery.directory = stack.graph
    await stack.discovery.cycle()
    assert stack.discovery.gate.sponsor_ids == frozenset()
    (read,) = [r for r in emulator.stats.recent() if r.route == SPONSORS_ROUTE]
    assert (read.status, read.user_id) == (403, emulator.seed.agent_user.id)

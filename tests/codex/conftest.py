"""One fleet per Codex test module: real replica processes on Azurite and the Graph emulator."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from service.devstack.azurite import Azurite
from service.mcp.hosts import BRIDGE_PUSH_CLIENT_NAME
from tests.bridge.fleet_stack import BRIDGE_FLEET_ENV, BridgeFleet, bridge_fleet
from tests.codex.codex_kit import CLIENT_NAME, codex_missing


def _skip_without_codex() -> None:
    missing = codex_missing()
    if missing is not None:
        pytest.skip(missing)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def codex_fleet(
    azurite: Azurite, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[BridgeFleet]:
    """One replica, as a fleet answers a host that holds one session: the replica is its /mcp."""
    _skip_without_codex()
    root: Path = tmp_path_factory.mktemp("codex-fleet")
    async with bridge_fleet(azurite, root, replicas=1, chats=3) as fleet:
        yield fleet


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def codex_push_fleet(
    azurite: Azurite, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[BridgeFleet]:
    """A fleet whose operator listed Codex as a push host (ENTRABOT_PUSH_HOSTS): the fleet then pushes
    to Codex's GET stream, and what Codex does with a push can be seen. Never the default: a message
    pushed to Codex counts as delivered."""
    _skip_without_codex()
    root: Path = tmp_path_factory.mktemp("codex-push-fleet")
    env = {**BRIDGE_FLEET_ENV, "ENTRABOT_PUSH_HOSTS": f"{BRIDGE_PUSH_CLIENT_NAME},{CLIENT_NAME}"}
    async with bridge_fleet(azurite, root, replicas=1, chats=3, env=env) as fleet:
        yield fleet


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def codex_inbox_fleet(
    azurite: Azurite, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[BridgeFleet]:
    """Two replica processes, so a restarted Codex can meet the other one (as behind a balancer); each
    polls every second without jitter, so a message is claimed for an inbox host within seconds."""
    _skip_without_codex()
    root: Path = tmp_path_factory.mktemp("codex-inbox-fleet")
    env = {**BRIDGE_FLEET_ENV, "ENTRABOT_CHAT_POLL_JITTER_S": "0"}
    async with bridge_fleet(azurite, root, replicas=2, chats=3, env=env) as fleet:
        yield fleet

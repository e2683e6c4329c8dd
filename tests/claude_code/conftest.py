"""One fleet, one fake model API and one socket folder for every Claude Code test of a module."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from claude_home import CLAUDE_CODE_VERSION
from fake_anthropic import fake_anthropic
from loopback_netns import unix_forwards

from service.devstack.azurite import Azurite
from tests.bridge.fleet_stack import bridge_fleet
from tests.claude_code.claude_kit import CLAUDE_BIN, ClaudeStack, write_token_file


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def claude_stack(
    azurite: Azurite, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[ClaudeStack]:
    assert CLAUDE_BIN.exists(), (
        f"Claude Code {CLAUDE_CODE_VERSION} is not installed in {CLAUDE_BIN.parent.parent.parent}: run `make setup`"
    )
    root = tmp_path_factory.mktemp("claude-stack")
    async with (
        bridge_fleet(azurite, root / "fleet", replicas=2, chats=3) as fleet,
        fake_anthropic() as api,
    ):
        stack = ClaudeStack(fleet, api, root / "sockets", write_token_file(root / "fleet-token"))
        async with unix_forwards(stack.sockets, stack.ports()):
            yield stack

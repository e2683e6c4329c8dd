"""Fixtures for the MCP tool tests: a Graph emulator per test and a replica's tool dependencies around it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from emulator.server import RunningEmulator, start_emulator
from tests.tools.tool_world import SEED, ToolWorld, tool_world


@pytest.fixture(scope="session")
def signing_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture
def emu(signing_key: rsa.RSAPrivateKey) -> Iterator[RunningEmulator]:
    with start_emulator(SEED, signing_key=signing_key) as running:
        yield running


@pytest.fixture
async def world(emu: RunningEmulator, tmp_path: Path) -> AsyncIterator[ToolWorld]:
    async with tool_world(emu, tmp_path) as built:
        yield built

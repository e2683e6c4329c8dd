"""Fixtures for the MCP tests: a live server with the demo tools on a free loopback port."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from tests.mcp.server_fixture import LiveMcp, live_mcp


@pytest.fixture
async def live() -> AsyncIterator[LiveMcp]:
    """A server with the default test settings: anonymous access on loopback."""
    async with live_mcp() as server:
        yield server


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=httpx.Timeout(10.0)) as client:
        yield client

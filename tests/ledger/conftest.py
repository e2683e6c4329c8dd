"""Fixtures for the ledger tests: a store (LocalBackend, or Blob on Azurite) and a fake clock."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from ledger_helpers import FakeClock

from service.storage.backend import MemoryBackend
from service.storage.local import LocalBackend


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=["local", pytest.param("blob", marks=pytest.mark.azurite)])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MemoryBackend]:
    """An empty shared store: a LocalBackend directory, or a fresh container in Azurite."""
    if request.param == "local":
        backend: MemoryBackend = LocalBackend(tmp_path / "store")
    else:
        from service.storage.blob import BlobBackend

        azurite = request.getfixturevalue("azurite")
        blob = BlobBackend.from_connection_string(azurite.connection_string, request.getfixturevalue("container_name"))
        await blob.ensure_container()
        backend = blob
    try:
        yield backend
    finally:
        await backend.aclose()


@pytest.fixture
def local_store(tmp_path: Path) -> LocalBackend:
    return LocalBackend(tmp_path / "store")

"""Fixtures for the ledger tests: a store (LocalBackend, or Blob on Azurite) and a fake clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.storage.backend import MemoryBackend
from service.storage.local import LocalBackend
from tests.ledger.ledger_helpers import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(any_backend: MemoryBackend) -> MemoryBackend:
    """An empty store of each kind (LocalBackend, then Azurite): the shared ``any_backend``."""
    return any_backend


@pytest.fixture
def local_store(tmp_path: Path) -> LocalBackend:
    return LocalBackend(tmp_path / "store")

"""Session fixtures shared by every test: one Azurite for the whole run, a fresh container per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from service.devstack.azurite import Azurite, start_azurite


@pytest.fixture(scope="session")
def azurite() -> Iterator[Azurite]:
    """A running Azurite: a testcontainers container where a Docker engine answers, else npm."""
    instance = start_azurite()
    try:
        yield instance
    finally:
        instance.stop()


@pytest.fixture
def container_name() -> str:
    """A fresh, valid Blob container name, so tests never see each other's keys."""
    return "t" + uuid.uuid4().hex[:20]

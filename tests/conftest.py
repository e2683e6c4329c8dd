"""Session fixtures shared by every test: one Azurite for the whole run, a fresh container per test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from azure.core.exceptions import ResourceNotFoundError
from azure.storage.blob.aio import ContainerClient

from service.devstack.azurite import Azurite, start_azurite
from service.storage.backend import MemoryBackend
from service.storage.blob import BlobBackend
from service.storage.local import LocalBackend
from service.telemetry.metrics import StorageMetrics


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


@pytest.fixture
async def missing_container(azurite: Azurite, container_name: str) -> AsyncIterator[str]:
    """A container name nobody created; deleted after the test if the test created it."""
    yield container_name
    async with ContainerClient.from_connection_string(
        azurite.connection_string, container_name
    ) as created:
        try:
            await created.delete_container()
        except ResourceNotFoundError:
            pass


async def _empty_container(azurite: Azurite, name: str) -> BlobBackend:
    backend = BlobBackend.from_connection_string(
        azurite.connection_string, name, metrics=StorageMetrics()
    )
    await backend.ensure_container()
    return backend


async def _drop_container(azurite: Azurite, name: str) -> None:
    """Delete a test's container: the session's Azurite keeps every blob in memory, and a 15-minute
    run that never deletes one slowed it until an append timed out (CI, 2026-12-01)."""
    async with ContainerClient.from_connection_string(azurite.connection_string, name) as container:
        try:
            await container.delete_container()
        except ResourceNotFoundError:
            pass


@pytest.fixture
async def blob_backend(azurite: Azurite, container_name: str) -> AsyncIterator[BlobBackend]:
    """An empty Blob container in Azurite."""
    backend = await _empty_container(azurite, container_name)
    try:
        yield backend
    finally:
        await backend.aclose()
        await _drop_container(azurite, container_name)


@pytest.fixture(params=["local", pytest.param("blob", marks=pytest.mark.azurite)])
async def any_backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[MemoryBackend]:
    """An empty store of each kind: a LocalBackend directory, then a fresh container in Azurite."""
    backend: MemoryBackend
    azurite: Azurite | None = None
    if request.param == "local":
        backend = LocalBackend(tmp_path / "store")
    else:  # Azurite is only started when a blob variant runs
        azurite, name = (
            request.getfixturevalue("azurite"),
            request.getfixturevalue("container_name"),
        )
        backend = await _empty_container(azurite, name)
    try:
        yield backend
    finally:
        await backend.aclose()
        if azurite is not None:
            await _drop_container(azurite, name)


# tryfirst: xdist's worker reads the groups in a collection_modifyitems hook of its own (it suffixes each
# node id with its group); run after it, as this hook did, the per-module group was never seen, each
# module's tests were spread over both workers and every module fixture (a fleet, a tiny bench run) was
# built once per worker: about four minutes of the suite.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``make test`` runs two workers, ``--dist loadgroup``), each module's tests stay
    on one worker, in order, as when run alone: many modules share one fleet per module and some end
    with a test that changes it ("last in this module"). A group a test names itself (one Docker engine,
    the Claude Code tests) spans modules."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))

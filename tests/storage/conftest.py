"""Storage fixtures: the contract's backends as environments, and scripted fake Blob endpoints.

A backend is described by the ENTRABOT_* environment that selects it, so a test process and the
separate processes of a race build theirs the same way: ``Settings`` from it, then ``get_backend``.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
from settings_env import settings_from_env

from service.from_settings.storage import storage_options
from service.storage.backend import MemoryBackend
from service.storage.blob import BlobBackend
from service.storage.resolution import get_backend
from service.telemetry.metrics import StorageMetrics
from tests.storage.storage_fakes import (
    FakeBlobEndpoint,
    Handler,
    TlsFiles,
    self_signed_loopback_tls,
    serve_fake_blob_endpoint,
)

StartFake = Callable[..., Awaitable[FakeBlobEndpoint]]


@pytest.fixture(params=["local", "blob"])
def backend_kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
async def backend_env(
    backend_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> dict[str, str]:
    """The environment that selects this test's backend; for Blob, its container exists."""
    if backend_kind == "local":
        return {"ENTRABOT_KEEP_MEMORY_LOCAL": "true", "ENTRABOT_DATA_DIR": str(tmp_path / "data")}
    azurite = request.getfixturevalue("azurite")  # only Blob tests start Azurite
    env = {
        "ENTRABOT_BLOB_ENDPOINT": azurite.blob_endpoint,
        "ENTRABOT_BLOB_CONTAINER": request.getfixturevalue("container_name"),
        "ENTRABOT_BLOB_CONNECTION_STRING": azurite.connection_string,
    }
    backend = get_backend(storage_options(settings_from_env(env)), metrics=StorageMetrics())
    assert isinstance(backend, BlobBackend)
    try:
        await backend.ensure_container()
    finally:
        await backend.aclose()
    return env


@pytest.fixture
async def backend(backend_env: dict[str, str]) -> AsyncIterator[MemoryBackend]:
    store = get_backend(storage_options(settings_from_env(backend_env)), metrics=StorageMetrics())
    try:
        yield store
    finally:
        await store.aclose()


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return self_signed_loopback_tls(tmp_path_factory.mktemp("tls"))


@pytest.fixture
async def fake_blob_endpoint(tls_files: TlsFiles) -> AsyncIterator[StartFake]:
    """Start fake endpoints: ``await fake_blob_endpoint(handler, tls=False)``; stopped after the test."""
    async with AsyncExitStack() as stack:

        async def start(handler: Handler, *, tls: bool = False) -> FakeBlobEndpoint:
            return await stack.enter_async_context(
                serve_fake_blob_endpoint(handler, tls_files if tls else None)
            )

        yield start


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on: connecting is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]

"""Fixtures for the migration and persona tests: each case against LocalBackend and Blob on Azurite."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from service.storage.backend import MemoryBackend


@pytest.fixture
def target(any_backend: MemoryBackend) -> MemoryBackend:
    """An empty store of each kind (LocalBackend, then Azurite): the shared ``any_backend``."""
    return any_backend


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside every source root, holding a secret no copy may ever read or write."""
    directory = tmp_path / "outside"
    directory.mkdir()
    (directory / "secret.txt").write_text("do not copy")
    return directory


def _write_tree(root: Path, files: dict[str, str | bytes]) -> None:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def _tree_snapshot(root: Path) -> dict[str, bytes]:
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and not path.is_symlink()
    }


@pytest.fixture
def write_tree() -> Callable[[Path, dict[str, str | bytes]], None]:
    """Create files (relative path → text or raw bytes) under a root."""
    return _write_tree


@pytest.fixture
def snapshot() -> Callable[[Path], dict[str, bytes]]:
    """Every regular file under a root (symlinks not followed) with its bytes."""
    return _tree_snapshot


async def _store_contents(backend: MemoryBackend, prefix: str = "") -> dict[str, str | None]:
    return {key: await backend.read_text(key) for key in await backend.list(prefix)}


@pytest.fixture
def store_contents() -> Callable[..., Awaitable[dict[str, str | None]]]:
    """Every key under a prefix of a backend with its text."""
    return _store_contents

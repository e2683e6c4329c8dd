"""LocalBackend: operational state as files under one directory.

Several local replicas may share one ``data_dir``, so every write takes a per-key ``flock`` (a
compare-and-swap is a read and a write; without a lock two processes could both pass the check).
File I/O runs in worker threads so the event loop never blocks on disk.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import hashlib
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from service.storage.errors import BackendUnavailableError, ConcurrencyError, StorageError
from service.storage.keys import InvalidKeyError, validate_key

# Housekeeping entries inside the root; never keys, never listed, never migrated.
LOCK_DIR = ".locks"
TMP_DIR = ".tmp"
PROCESS_LOCK_FILE = ".singleton.lock"  # the per-machine process lock (storage.resolution names it)
_HIDDEN = (LOCK_DIR, TMP_DIR, PROCESS_LOCK_FILE)
T = TypeVar("T")


def content_etag(data: bytes) -> str:
    """The ETag of a local value: the SHA-256 of its bytes, quoted like an HTTP ETag."""
    return '"' + hashlib.sha256(data).hexdigest() + '"'


class LocalBackend:
    """A MemoryBackend over files under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).expanduser()

    def describe(self) -> str:
        return f"LocalBackend root={self.root}"

    # --- paths and locks ---

    def _path(self, key: str) -> Path:
        top = validate_key(key).split("/", 1)[0]
        if top in _HIDDEN:
            raise InvalidKeyError(
                f"invalid storage key {key!r}: {top!r} is reserved for housekeeping"
            )
        return self.root / key

    @contextmanager
    def _locked(self, key: str) -> Iterator[None]:
        lock_dir = self.root / LOCK_DIR
        lock_dir.mkdir(parents=True, exist_ok=True)
        name = hashlib.sha256(key.encode()).hexdigest()[:40] + ".lock"
        fd = os.open(lock_dir / name, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the flock

    def _temp_file(self, data: bytes) -> Path:
        tmp_dir = self.root / TMP_DIR
        tmp_dir.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=tmp_dir)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        except BaseException:
            os.unlink(name)
            raise
        return Path(name)

    # --- sync bodies (run in threads) ---

    def _read(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            # "a" when only "a/b" exists is absent, as on Blob where the two are unrelated names.
            return None

    def _write(self, key: str, content: str, if_match: str | None, if_absent: bool) -> str:
        path = self._path(key)
        data = content.encode("utf-8")
        with self._locked(key):
            if if_match is not None:
                current = self._read(key)
                if current is None or content_etag(current) != if_match:
                    raise ConcurrencyError(f"{key}: ETag no longer matches")
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._temp_file(data)
            try:
                if if_absent:
                    self._create_exclusive(tmp, path, data, key)
                else:
                    os.replace(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)
        return content_etag(data)

    @staticmethod
    def _create_exclusive(tmp: Path, path: Path, data: bytes, key: str) -> None:
        # A hard link publishes a fully written file atomically and fails if the key exists.
        try:
            os.link(tmp, path)
            return
        except FileExistsError:
            raise ConcurrencyError(f"{key}: already exists") from None
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EXDEV, errno.EMLINK):
                raise
        try:  # filesystems without hard links: exclusive create, under the key lock
            with open(path, "xb") as fh:
                fh.write(data)
        except FileExistsError:
            raise ConcurrencyError(f"{key}: already exists") from None

    def _append(self, key: str, content: str) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = content.encode("utf-8")
        with self._locked(key):
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)

    def _list(self, prefix: str) -> list[str]:
        if not self.root.is_dir():
            return []
        keys: list[str] = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            rel_dir = Path(dirpath).relative_to(self.root)
            if rel_dir == Path("."):
                dirnames[:] = [d for d in dirnames if d not in _HIDDEN]
                filenames = [f for f in filenames if f not in _HIDDEN]
            for name in filenames:
                key = (rel_dir / name).as_posix() if rel_dir != Path(".") else name
                if key.startswith(prefix):
                    keys.append(key)
        return sorted(keys)

    def _check(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            probe = self._temp_file(b"")
            probe.unlink()
        except OSError as exc:
            raise BackendUnavailableError(
                f"data directory {self.root} is not writable: {exc.strerror}"
            ) from exc

    async def _in_thread(self, what: str, fn: Callable[..., T], *args: object) -> T:
        """Run blocking file I/O off the event loop; a failing disk surfaces as a StorageError."""
        try:
            return await asyncio.to_thread(fn, *args)
        except OSError as exc:
            raise StorageError(f"{what} under {self.root} failed: {exc.strerror or exc}") from exc

    # --- MemoryBackend ---

    async def read_text(self, key: str) -> str | None:
        data = await self._in_thread(f"read of {key!r}", self._read, key)
        return None if data is None else data.decode("utf-8")

    async def read_text_with_etag(self, key: str) -> tuple[str | None, str | None]:
        data = await self._in_thread(f"read of {key!r}", self._read, key)
        if data is None:
            return None, None
        return data.decode("utf-8"), content_etag(data)

    async def write_text(
        self, key: str, content: str, *, if_match: str | None = None, if_absent: bool = False
    ) -> str:
        if if_match is not None and if_absent:
            raise ValueError("if_match and if_absent are mutually exclusive")
        return await self._in_thread(
            f"write of {key!r}", self._write, key, content, if_match, if_absent
        )

    async def append_text(self, key: str, content: str) -> None:
        await self._in_thread(f"append to {key!r}", self._append, key, content)

    async def exists(self, key: str) -> bool:
        return await self._in_thread(f"exists of {key!r}", self._path(key).is_file)

    async def list(self, prefix: str = "") -> list[str]:
        return await self._in_thread("list", self._list, prefix)

    async def check(self) -> None:
        await asyncio.to_thread(self._check)

    async def aclose(self) -> None:
        return None

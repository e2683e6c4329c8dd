"""PersonaBackend: move Claude Code persona-memory files between a local directory and ``claude_memory/``.

A manual migration and compatibility utility, not part of normal operation: nothing keeps the two in
sync on every write. Push never overwrites what the cloud holds (except an explicit ``push_one``);
pull treats the cloud as authoritative and overwrites local files. No path or key may lead outside
the local root, and symlinks leading out are never followed, in either direction.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from service.storage.backend import MemoryBackend
from service.storage.keys import InvalidKeyError, validate_key
from service.storage.local_tree import OutsideRootError, read_text_under, write_text_under
from service.storage.migration import migrate_local_to_backend
from service.storage.transfer import (
    DEFAULT_CONCURRENCY,
    Progress,
    ProgressCounter,
    TransferReport,
    for_each_bounded,
)

PERSONA_PREFIX = "claude_memory/"

PersonaReport = TransferReport


class PersonaBackend:
    """Persona files under ``local_root`` ↔ keys under ``claude_memory/`` in ``backend``."""

    def __init__(
        self, backend: MemoryBackend, *, local_root: Path, concurrency: int = DEFAULT_CONCURRENCY
    ) -> None:
        self._backend = backend
        self.local_root = Path(local_root).expanduser()
        self._concurrency = concurrency

    async def push_one(self, path: Path) -> PersonaReport:
        """Upload one file, overwriting its key: the caller asked for this file explicitly.

        A relative ``path`` is relative to the working directory, like any path on a command line.
        """
        report = TransferReport()
        with report.outcome_of(str(path)):
            rel = self._relative_to_root(Path(path))
            key = PERSONA_PREFIX + rel
            with report.outcome_of(key):
                content = await asyncio.to_thread(read_text_under, self.local_root.resolve(), rel)
                await self._backend.write_text(key, content)
                report.copied.append(key)
        return report

    async def push_all(self, *, progress: Progress | None = None) -> PersonaReport:
        """Upload every local file whose key is not in the cloud yet; never overwrites."""
        return await migrate_local_to_backend(
            [(self.local_root, PERSONA_PREFIX)],
            self._backend,
            progress=progress,
            concurrency=self._concurrency,
        )

    async def pull_all(self, *, progress: Progress | None = None) -> PersonaReport:
        """Download every key under ``claude_memory/`` to disk; the cloud wins over local content."""
        report = TransferReport()
        keys = await self._backend.list(PERSONA_PREFIX)
        root = self.local_root.resolve()
        await asyncio.to_thread(root.mkdir, parents=True, exist_ok=True)
        counter = ProgressCounter(len(keys), progress)

        async def pull_one(key: str) -> None:
            with report.outcome_of(key):
                rel = _relative_key(key)
                content = await self._backend.read_text(key)
                if content is None:
                    report.skipped.append(key)  # deleted since the listing; nothing to pull
                else:
                    await asyncio.to_thread(write_text_under, root, rel, content)
                    report.copied.append(key)
            counter.advance()

        await for_each_bounded(keys, pull_one, limit=self._concurrency)
        report.sort()
        return report

    def _relative_to_root(self, path: Path) -> str:
        """``path`` relative to the root, as given or with the root's own symlink resolved.

        ``..`` is collapsed lexically first, so ``root/../etc/x`` is outside; symlinks inside the
        path are then checked by reading through ``read_text_under``.
        """
        candidate = Path(os.path.normpath(path.expanduser().absolute()))
        for base in (Path(os.path.normpath(self.local_root.absolute())), self.local_root.resolve()):
            if candidate != base and candidate.is_relative_to(base):
                return candidate.relative_to(base).as_posix()
        raise OutsideRootError(f"{path} is not inside the persona directory {self.local_root}")


def _relative_key(key: str) -> str:
    """The local path a ``claude_memory/`` key maps to; OutsideRootError for ``..`` or absolute keys."""
    if not key.startswith(PERSONA_PREFIX):
        raise OutsideRootError(f"{key} is not under {PERSONA_PREFIX}")
    rel = key[len(PERSONA_PREFIX) :]
    try:
        return validate_key(rel)
    except InvalidKeyError as exc:
        raise OutsideRootError(
            f"{key} cannot be a path inside the persona directory: {exc}"
        ) from None

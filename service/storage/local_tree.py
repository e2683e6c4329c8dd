"""Text files under a local root, walked, read and written without ever passing through a symlink out.

Migration and persona sync copy a user's directory tree into the store and back. A symlink in that tree
pointing at ``~/.ssh`` or ``/etc`` must not turn a copy into an exfiltration (push) or an overwrite
(pull), so every path is resolved and checked against the resolved root before it is opened. Symlinks
that stay inside the root are followed, so a tree that links one note to another still copies.
"""

from __future__ import annotations

import os
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path


class LocalTreeError(Exception):
    """A local file that cannot be copied as text; the message says why."""


class OutsideRootError(LocalTreeError):
    """A path that, with its symlinks resolved, lies outside the root it was meant to stay in."""


class NotRegularFileError(LocalTreeError):
    """A FIFO, socket, device or directory where a regular file was expected."""


class NotTextError(LocalTreeError):
    """A file whose bytes are not UTF-8: the store holds text only."""


@dataclass
class TreeListing:
    """Every file under a root (relative POSIX paths, sorted) and the directories that could not be read."""

    files: list[str] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)


def list_tree(root: Path) -> TreeListing:
    """Walk ``root`` (already resolved) without descending into symlinked directories.

    A symlinked directory that points inside the root is left out (its files are listed under their
    real path); one that points outside is listed, so reading it is rejected visibly instead of the
    directory going missing without a word.
    """
    listing = TreeListing()

    def unreadable(exc: OSError) -> None:
        where = Path(exc.filename).relative_to(root).as_posix() if exc.filename else "."
        listing.errors.append((where, f"cannot list directory: {exc.strerror or exc}"))

    for dirpath, dirnames, filenames in os.walk(root, onerror=unreadable, followlinks=False):
        here = Path(dirpath)
        for name in dirnames:
            if (here / name).is_symlink() and not _is_inside(root, _resolve(here / name)):
                listing.files.append((here / name).relative_to(root).as_posix())
        listing.files.extend((here / name).relative_to(root).as_posix() for name in filenames)
    listing.files.sort()
    return listing


def read_text_under(root: Path, rel: str) -> str:
    """The UTF-8 text of ``root/rel``; raises LocalTreeError subclasses or OSError."""
    real = resolve_inside(root, rel)
    # O_NONBLOCK: opening a FIFO for reading would otherwise wait forever for a writer.
    fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with open(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise NotRegularFileError(f"{rel} is not a regular file; only regular files are copied")
        data = fh.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotTextError(
            f"{rel} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "the store holds text only: convert the file or move it out of the directory"
        ) from None


def write_text_under(root: Path, rel: str, content: str) -> None:
    """Atomically replace ``root/rel`` with ``content``, creating parent directories inside the root."""
    real = resolve_inside(root, rel)
    # Directories are created only after the check, on the resolved path, so a symlinked component
    # pointing out of the root can never make us create anything outside it.
    real.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=real.parent, prefix=f".{real.name}.", suffix=".partial")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(content.encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, real)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def resolve_inside(root: Path, rel: str) -> Path:
    """``root/rel`` with every symlink resolved; OutsideRootError unless it stays strictly inside root."""
    real = _resolve(root / rel)
    if real == root or not _is_inside(root, real):
        raise OutsideRootError(f"{rel} leads outside {root}; it is not followed")
    return real


def _resolve(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop on Python < 3.13
        raise NotRegularFileError(f"{path} cannot be resolved: {exc}") from None


def _is_inside(root: Path, path: Path) -> bool:
    return path == root or path.is_relative_to(root)

"""What ``migrate`` and ``persona`` share: the persona directory Claude Code uses, the guard against
copying a directory into itself, the progress bar and the report."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from service.cli.common import EXIT_FAILED, EXIT_OK, ConfigurationError
from service.storage.backend import MemoryBackend
from service.storage.claude_code_memory import ClaudeMemory, ClaudeMemoryError, locate_claude_memory
from service.storage.local import LocalBackend
from service.storage.migration import source_overlapping
from service.storage.transfer import Progress, TransferReport

PERSONA_DEFAULT = "Claude Code's auto-memory directory of the --project folder"


@contextmanager
def progress_bar(description: str, *, quiet: bool) -> Iterator[Progress]:
    """A tqdm bar on stderr, shown only on a terminal so logs and pipes stay clean."""
    from tqdm import tqdm

    disabled = quiet or not sys.stderr.isatty()
    with tqdm(desc=description, unit="file", file=sys.stderr, disable=disabled, leave=False) as bar:

        def update(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        yield update


def claude_memory_or_exit(project: Path | None, *, instead: str) -> ClaudeMemory:
    """Claude Code's auto-memory directory for ``project`` (default: the working directory)."""
    try:
        return locate_claude_memory(project or Path.cwd(), home=Path.home())
    except ClaudeMemoryError as exc:
        raise ConfigurationError(f"{exc}; or pass {instead}") from exc


def say_which_persona_directory(found: ClaudeMemory | None) -> None:
    """The default was worked out, not given: say which directory it is and why."""
    if found is not None:
        absent = "" if found.directory.is_dir() else " (absent: nothing there yet)"
        print(f"persona memory: {found.directory}{absent}, {found.why}")


def refuse_copy_into_itself(
    target: MemoryBackend, sources: Sequence[tuple[Path, str]], *, instead: str
) -> None:
    """Without Blob settings the target is the local data directory, often the very source."""
    if not isinstance(target, LocalBackend):
        return
    source = source_overlapping(sources, target.root)
    if source is not None:
        raise ConfigurationError(
            f"the settings resolve to the local data directory {target.root} (ENTRABOT_BLOB_ENDPOINT and "
            f"ENTRABOT_BLOB_CONTAINER unset, or ENTRABOT_KEEP_MEMORY_LOCAL=true), and {source} is that "
            f"directory or overlaps it, so this would copy it into itself; nothing written. Set "
            f"ENTRABOT_BLOB_ENDPOINT and ENTRABOT_BLOB_CONTAINER to copy into the container, or pass {instead}"
        )


def print_report(report: TransferReport, *, dry_run: bool = False) -> int:
    """Every rejection and error on stderr, the summary on stdout; the exit code for the report."""
    for key, message in report.rejected:
        print(f"rejected: {key}: {message}", file=sys.stderr)
    for key, message in report.errors:
        print(f"error: {key}: {message}", file=sys.stderr)
    print(report.summary(dry_run=dry_run))
    return EXIT_OK if report.ok else EXIT_FAILED


def add_project_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--project",
        type=Path,
        metavar="DIR",
        help="the folder Claude Code runs in for this agent, whose auto-memory directory "
        "(~/.claude/projects/<project>/memory, or its autoMemoryDirectory setting) is the default "
        "persona directory (default: the working directory)",
    )

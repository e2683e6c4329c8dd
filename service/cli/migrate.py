"""``migrate``: copy local state directories into the configured backend (never deletes)."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from service.cli.common import Command, ConfigurationError, open_target, settings_or_exit
from service.cli.transfer import (
    PERSONA_DEFAULT,
    add_project_option,
    claude_memory_or_exit,
    print_report,
    progress_bar,
    refuse_copy_into_itself,
    say_which_persona_directory,
)
from service.storage.claude_code_memory import ClaudeMemory
from service.storage.migration import normalize_prefix
from service.storage.persona import PERSONA_PREFIX


def parse_source(text: str) -> tuple[Path, str]:
    """``DIR`` or ``DIR:PREFIX`` (split at the last colon)."""
    directory, colon, prefix = text.rpartition(":")
    if not colon:
        directory, prefix = text, ""
    if not directory:
        raise argparse.ArgumentTypeError(f"{text!r}: expected DIR or DIR:PREFIX")
    try:
        return Path(directory).expanduser(), normalize_prefix(prefix)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: bad prefix: {exc}") from None


def configure_migrate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--source",
        action="append",
        type=parse_source,
        metavar="DIR[:PREFIX]",
        help="a local directory to copy, under an optional key prefix (repeatable; default: "
        f"ENTRABOT_DATA_DIR at the container root, and {PERSONA_DEFAULT} under {PERSONA_PREFIX})",
    )
    add_project_option(parser)
    parser.add_argument(
        "--dry-run", action="store_true", help="read and check every file, write nothing"
    )


def run_migrate(args: argparse.Namespace) -> int:
    return asyncio.run(migrate(args))


async def migrate(args: argparse.Namespace) -> int:
    from service.storage.migration import migrate_local_to_backend
    from service.from_settings.storage import storage_options
    from service.storage.resolution import data_dir

    settings = settings_or_exit()
    instead = "--source DIR[:PREFIX] for each directory to copy"
    sources = args.source
    if sources and args.project is not None:
        raise ConfigurationError(
            "--project only chooses the default persona directory; with --source, "
            f"name it as DIR:{PERSONA_PREFIX}"
        )
    persona: ClaudeMemory | None = None
    if not sources:
        # data_dir() is the directory the backend resolution would use for local state.
        persona = claude_memory_or_exit(args.project, instead=instead)
        sources = [(data_dir(storage_options(settings)), ""), (persona.directory, PERSONA_PREFIX)]
    target = await open_target(settings)
    try:
        refuse_copy_into_itself(target, sources, instead=instead)
        print(f"target: {target.describe()}")
        say_which_persona_directory(persona)
        with progress_bar("migrate", quiet=args.quiet) as progress:
            report = await migrate_local_to_backend(
                sources, target, progress=progress, dry_run=args.dry_run
            )
    finally:
        await target.aclose()
    return print_report(report, dry_run=args.dry_run)


COMMAND = Command(
    "migrate",
    "copy local state directories into the configured backend (never deletes)",
    configure_migrate,
    run_migrate,
)

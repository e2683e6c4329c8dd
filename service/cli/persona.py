"""``persona push`` / ``persona pull``: persona-memory files between the local directory and the backend."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from service.cli.common import (
    Command,
    ConfigurationError,
    common_options,
    open_target,
    settings_or_exit,
)
from service.cli.transfer import (
    PERSONA_DEFAULT,
    add_project_option,
    claude_memory_or_exit,
    print_report,
    progress_bar,
    refuse_copy_into_itself,
    say_which_persona_directory,
)
from service.storage.persona import PERSONA_PREFIX


def configure_persona(parser: argparse.ArgumentParser) -> None:
    root = argparse.ArgumentParser(add_help=False)
    root.add_argument(
        "--root",
        type=Path,
        metavar="DIR",
        help=f"the local persona-memory directory (default: {PERSONA_DEFAULT})",
    )
    add_project_option(root)
    actions = parser.add_subparsers(dest="persona_action", metavar="{push,pull}", required=True)
    push = actions.add_parser(
        "push",
        parents=[root, common_options()],
        help=f"upload FILE (overwriting), or every file not yet under {PERSONA_PREFIX}",
        description=f"Upload persona files to {PERSONA_PREFIX}. Without FILE, files already in the cloud "
        "are left alone; with FILE, that file's key is overwritten.",
    )
    push.add_argument("file", nargs="?", type=Path, metavar="FILE", help="one file inside --root")
    actions.add_parser(
        "pull",
        parents=[root, common_options()],
        help=f"download every key under {PERSONA_PREFIX}, overwriting local files",
        description=f"Download every key under {PERSONA_PREFIX} into --root; "
        "the cloud wins over local files.",
    )


def run_persona(args: argparse.Namespace) -> int:
    return asyncio.run(persona(args))


async def persona(args: argparse.Namespace) -> int:
    from service.storage.persona import PersonaBackend

    settings = settings_or_exit()
    if args.root is not None and args.project is not None:
        raise ConfigurationError(
            "pass --root or --project, not both: --project only chooses the default --root"
        )
    found = (
        None if args.root is not None else claude_memory_or_exit(args.project, instead="--root DIR")
    )
    root = found.directory if found is not None else args.root.expanduser()
    target = await open_target(settings)
    try:
        refuse_copy_into_itself(target, [(root, PERSONA_PREFIX)], instead="--root DIR outside it")
        print(f"target: {target.describe()} ({PERSONA_PREFIX})")
        say_which_persona_directory(found)
        backend = PersonaBackend(target, local_root=root)
        if args.persona_action == "push" and args.file is not None:
            report = await backend.push_one(args.file.expanduser().absolute())
        else:
            with progress_bar(f"persona {args.persona_action}", quiet=args.quiet) as progress:
                sync = backend.push_all if args.persona_action == "push" else backend.pull_all
                report = await sync(progress=progress)
    finally:
        await target.aclose()
    return print_report(report)


COMMAND = Command(
    "persona",
    f"push persona-memory files to {PERSONA_PREFIX} or pull them back",
    configure_persona,
    run_persona,
)

"""``entrabot-fleet``: the command line of the Entrabot Fleet worker service.

Each command is one module here holding a ``COMMAND`` entry (name, one-line help, its arguments, the
function that runs it); adding a command means writing its module and adding its entry to
``COMMANDS``. A command imports its heavy dependencies when it runs, not when the parser is built.
Exit codes: 0 done, 1 the command ran but something failed (the report says what), 2 bad
configuration or usage.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable, Sequence

from service.cli import (
    channel,
    demo,
    doctor,
    emulator,
    migrate,
    persona,
    repair_chat,
    say,
    serve,
    signin,
    up,
)
from service.cli.common import (
    EXIT_CONFIG,
    EXIT_FAILED,
    EXIT_OK,
    PROG,
    PROGRESS_COMMANDS,
    Command,
    CommandFailed,
    ConfigurationError,
    common_options,
)

COMMANDS: tuple[Command, ...] = (
    serve.COMMAND,
    demo.COMMAND,
    up.COMMAND,
    say.COMMAND,
    emulator.COMMAND,
    repair_chat.COMMAND,
    doctor.COMMAND,
    signin.COMMAND,
    channel.COMMAND,
    migrate.COMMAND,
    persona.COMMAND,
)


def build_parser(commands: Sequence[Command] = COMMANDS) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        parents=[common_options(top_level=True)],
        prog=PROG,
        description="Entrabot Fleet: a horizontally scaled worker service connecting an AI agent to "
        "Microsoft Teams and mail over MCP, with its shared state in Azure Blob Storage.",
        epilog="Configuration comes from ENTRABOT_* environment variables (and an optional .env). "
        f"Exit codes: {EXIT_OK} done, {EXIT_FAILED} something failed (see the report), "
        f"{EXIT_CONFIG} bad configuration or usage.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    subcommands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for command in commands:
        progress = command.name in PROGRESS_COMMANDS
        sub = subcommands.add_parser(
            command.name,
            parents=[common_options(progress=progress)],
            help=command.help,
            description=command.help,
        )
        command.configure(sub)
        sub.set_defaults(run=command.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help and usage errors: argparse has already printed
        return exc.code if isinstance(exc.code, int) else EXIT_CONFIG
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_CONFIG
    run: Callable[[argparse.Namespace], int] = args.run  # set by the subcommand's parser
    try:
        return run(args)
    except ConfigurationError as exc:
        if args.debug:  # where the refusal came from, for whoever asks
            traceback.print_exc()
        _say(str(exc))
        return EXIT_CONFIG
    except CommandFailed as exc:
        _say(str(exc))
        return EXIT_FAILED
    except KeyboardInterrupt:
        _say("interrupted")
        return 130
    except Exception as exc:
        if args.debug:
            traceback.print_exc()
        hint = "" if args.debug else " (rerun with --debug for a traceback)"
        _say(f"{type(exc).__name__}: {exc}{hint}")
        return EXIT_FAILED


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(PROG)
    except PackageNotFoundError:  # run from a source tree without installing
        from service import __version__

        return __version__


def _say(message: str) -> None:
    print(f"{PROG}: {' '.join(message.split())}", file=sys.stderr)

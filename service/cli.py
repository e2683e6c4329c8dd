"""``entrabot-fleet``: the command line of the Entrabot Fleet worker service.

Each command is one ``Command`` entry (name, one-line help, its arguments, the function that runs
it); adding a command means writing its function and adding an entry to ``COMMANDS``. Exit codes:
0 done, 1 the command ran but something failed (the report says what), 2 bad configuration or usage.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from service.config import Settings, SettingsError, load_settings
from service.storage.backend import MemoryBackend
from service.storage.claude_code_memory import ClaudeMemory, ClaudeMemoryError, locate_claude_memory
from service.storage.errors import StorageError
from service.storage.local import LocalBackend
from service.storage.migration import normalize_prefix, source_overlapping
from service.storage.persona import PERSONA_PREFIX
from service.storage.transfer import Progress, TransferReport

if TYPE_CHECKING:
    from service.chat_repair import StoredCursor
    from service.config import Settings

PROG = "entrabot-fleet"
EXIT_OK, EXIT_FAILED, EXIT_CONFIG = 0, 1, 2
PERSONA_DEFAULT = "Claude Code's auto-memory directory of the --project folder"


class ConfigurationError(Exception):
    """The environment names no usable setup; the message says what to fix (exit code 2)."""


class CommandFailed(Exception):
    """The command ran and could not do its work; the message says why, on one line (exit code 1)."""


@dataclass(frozen=True)
class Command:
    """One subcommand: ``configure`` adds its arguments, ``run`` does the work and returns the exit code."""

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


# --- shared plumbing ------------------------------------------------------------------------------


def settings_or_exit() -> Settings:
    """The settings from the environment and ``.env``; a bad value is a one-line configuration error."""
    try:
        return load_settings()
    except SettingsError as exc:
        raise ConfigurationError(str(exc)) from exc


async def open_target(settings: Settings) -> MemoryBackend:
    """The backend the settings resolve to, checked reachable before anything is written."""
    from service.from_settings.storage import storage_options
    from service.storage.resolution import assert_backend_config  # heavy imports only when needed
    from service.telemetry.metrics import StorageMetrics

    try:
        # A one-off command's storage operations are its own: nobody scrapes them.
        return await assert_backend_config(storage_options(settings), metrics=StorageMetrics())
    except StorageError as exc:
        raise ConfigurationError(str(exc)) from exc


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


# --- migrate --------------------------------------------------------------------------------------


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


def add_project_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--project",
        type=Path,
        metavar="DIR",
        help="the folder Claude Code runs in for this agent, whose auto-memory directory "
        "(~/.claude/projects/<project>/memory, or its autoMemoryDirectory setting) is the default "
        "persona directory (default: the working directory)",
    )


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


# --- persona --------------------------------------------------------------------------------------


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


# --- serve ---------------------------------------------------------------------------------------


def port_number(text: str) -> int:
    """A TCP port, 1-65535 (a larger number would silently wrap to another port)."""
    try:
        port = int(text)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (1-65535)")
    return port


def configure_serve(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", help="address to listen on (default: ENTRABOT_HOST, 127.0.0.1)")
    parser.add_argument(
        "--port", type=port_number, help="port to listen on (default: ENTRABOT_PORT, 8080)"
    )


def run_serve(args: argparse.Namespace) -> int:
    from service.serve import ServeError, serve

    try:
        return serve(host=args.host, port=args.port)
    except ServeError as exc:
        raise ConfigurationError(str(exc)) from exc


# --- demo ----------------------------------------------------------------------------------------


def configure_demo(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--replicas", type=int, default=3, help="replicas in the local fleet (default 3)"
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop after this many seconds (default: run until Ctrl-C)",
    )


def run_demo(args: argparse.Namespace) -> int:
    from service.devstack.demo import DemoOptions, run_demo as demo

    if args.replicas < 1:
        raise ConfigurationError("--replicas must be at least 1")
    return asyncio.run(demo(DemoOptions(replicas=args.replicas, duration_s=args.duration)))


# --- emulator ------------------------------------------------------------------------------------


def configure_emulator(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--seed", type=Path, default=None, help="tenant seed JSON (default: the demo tenant)"
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    parser.add_argument("--port", type=int, default=8088, help="port to listen on (default 8088)")
    parser.add_argument(
        "--public-url", default=None, help="base URL clients reach it at (default: from requests)"
    )


def run_emulator(args: argparse.Namespace) -> int:
    from emulator.seed import demo_seed_path
    from emulator.server import serve as serve_emulator

    seed = args.seed or demo_seed_path()
    if not Path(seed).is_file():
        raise ConfigurationError(
            f"seed file {seed} does not exist; pass --seed FILE or omit it for the demo tenant"
        )
    serve_emulator(seed, args.host, args.port, public_url=args.public_url)
    return 0


# --- repair-chat ---------------------------------------------------------------------------------


def configure_repair_chat(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "chat_id", metavar="CHAT_ID", help="the Teams chat id (as /readyz lists it)"
    )
    parser.add_argument(
        "--yes",
        action="store_true",
        help="write the new cursor (without it: show what would be written, write nothing)",
    )


def run_repair_chat(args: argparse.Namespace) -> int:
    return asyncio.run(repair_chat(args.chat_id, write=args.yes))


async def repair_chat(chat_id: str, *, write: bool) -> int:
    from service.chat_repair import CursorState, inspect_cursor
    from service.serve import ServeError, load_settings

    if not chat_id.strip():
        raise ConfigurationError(
            "CHAT_ID is empty; pass the chat id /readyz lists under corrupt_chat_cursors"
        )
    try:
        settings = load_settings()
    except ServeError as exc:
        raise ConfigurationError(str(exc)) from exc
    backend = await open_target(settings)
    try:
        print(f"state: {backend.describe()}")
        try:
            stored = await inspect_cursor(backend, chat_id)
        except StorageError as exc:
            raise CommandFailed(
                f"could not read the cursor of chat {chat_id} ({type(exc).__name__}: {exc}); "
                "nothing written"
            ) from None
        if stored.state is CursorState.READABLE:
            print(f"chat {chat_id}: the cursor {stored.key} is readable; nothing to repair")
            return EXIT_OK
        if stored.state is CursorState.NO_ETAG:
            raise CommandFailed(
                f"the store returned {stored.key} without an ETag, so it cannot be replaced by "
                "compare-and-swap; nothing written (check the storage endpoint or proxy)"
            )
        return await _repair_from_graph(settings, backend, chat_id, stored, write=write)
    finally:
        await backend.aclose()


async def _repair_from_graph(
    settings: Settings, backend: MemoryBackend, chat_id: str, stored: StoredCursor, *, write: bool
) -> int:
    from service.chat_repair import CursorState, plan_repair, write_repair
    from service.graph.client import GraphClient
    from service.graph.options import GraphOptions
    from service.telemetry.metrics import Metrics
    from service.replica_clients import replica_tokens
    from service.graph.errors import GraphConnectionError, GraphError, GraphForbidden, GraphNotFound
    from service.graph.errors import TokenConfigurationError
    from service.graph.http_pool import new_http_client
    from service.clock import utc_now
    from service.storage.errors import ConcurrencyError

    async with new_http_client(read_timeout_s=settings.graph_timeout_s) as http:
        try:
            metrics = Metrics()
            tokens = replica_tokens(
                settings, backend, http, replica_id="repair-chat", metrics=metrics
            )
            graph = GraphClient(
                GraphOptions(settings.graph_url), tokens, http=http, metrics=metrics.graph
            )
        except (TokenConfigurationError, ValueError) as exc:
            raise ConfigurationError(str(exc)) from exc
        try:
            newest = await graph.messages.get_newest_chat_message(chat_id)
        except (GraphNotFound, GraphForbidden) as exc:
            raise CommandFailed(
                f"Graph does not show chat {chat_id} to the agent user (HTTP {exc.status}); "
                "check the chat id; nothing written"
            ) from None
        except GraphConnectionError as exc:
            raise CommandFailed(
                f"{exc}; check ENTRABOT_GRAPH_URL ({settings.graph_url}) and the network path to "
                "it; nothing written"
            ) from None
        except GraphError as exc:
            raise CommandFailed(f"{type(exc).__name__}: {exc}; nothing written") from None
    if stored.state is CursorState.ABSENT:
        print(
            f"chat {chat_id}: no cursor yet, nothing to repair (a replica bootstraps it when it first sees "
            "the chat)"
        )
        return EXIT_OK
    now = utc_now()
    plan = plan_repair(chat_id, newest, now=now)
    print(
        f"chat {chat_id}: the cursor {stored.key} is corrupt ({stored.problem}); the chat is stalled on "
        "every replica"
    )
    for line in plan.describe(now):
        print(f"  {line}")
    if not write:
        print("dry run: nothing written; rerun with --yes to write this cursor")
        return EXIT_OK
    try:
        await write_repair(backend, stored, plan)
    except ConcurrencyError:
        raise CommandFailed(
            f"the cursor of chat {chat_id} changed since it was read (another repair?); nothing "
            "written; run the command again to see its state"
        ) from None
    except StorageError as exc:
        raise CommandFailed(
            f"writing the cursor of chat {chat_id} failed ({type(exc).__name__}: {exc}); run the "
            "command again to see whether it landed"
        ) from None
    print(
        f"repaired: wrote {stored.key} over the corrupt value (If-Match on its ETag); replicas poll the chat "
        "again on their next cycle"
    )
    return EXIT_OK


# --- doctor --------------------------------------------------------------------------------------


def run_doctor(args: argparse.Namespace) -> int:
    from service.doctor import run_doctor as doctor

    return EXIT_OK if asyncio.run(doctor()) else EXIT_FAILED


# --- signin --------------------------------------------------------------------------------------


def configure_signin(parser: argparse.ArgumentParser) -> None:
    from service.signin.command import DEFAULT_TIMEOUT_S

    parser.add_argument(
        "--replace",
        action="store_true",
        help="sign in as someone other than the person the container holds (then restart the replicas)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"give up waiting for the person after this long (default {DEFAULT_TIMEOUT_S:.0f}, "
        "the code's own lifetime)",
    )


def run_signin(args: argparse.Namespace) -> int:
    return asyncio.run(signin(replace=args.replace, timeout_s=args.timeout))


async def signin(*, replace: bool, timeout_s: float) -> int:
    from service.graph.errors import TokenConfigurationError
    from service.from_settings.signin import check_sign_in_settings, sign_in_with_settings
    from service.signin.flow import SignInEnded

    if timeout_s <= 0:
        raise ConfigurationError("--timeout must be a positive number of seconds")
    settings = settings_or_exit()
    try:
        check_sign_in_settings(settings)
    except TokenConfigurationError as exc:
        raise ConfigurationError(str(exc)) from exc
    backend = await open_target(settings)
    try:
        print(f"state: {backend.describe()}")
        await sign_in_with_settings(settings, backend, replace=replace, timeout_s=timeout_s)
    except SignInEnded as exc:
        raise CommandFailed(str(exc)) from None
    except StorageError as exc:
        raise CommandFailed(
            f"the sign-in could not be stored ({type(exc).__name__}: {exc}); run the command again"
        ) from None
    finally:
        await backend.aclose()
    return EXIT_OK


# --- channel --------------------------------------------------------------------------------------


def configure_channel(parser: argparse.ArgumentParser) -> None:
    from service.bridge.cli_options import add_channel_options

    add_channel_options(parser)


def run_channel(args: argparse.Namespace) -> int:
    from service.bridge.cli_options import run_channel_command

    return run_channel_command(args, ConfigurationError)


# --- the command table and the entry point --------------------------------------------------------

COMMANDS: tuple[Command, ...] = (
    Command(
        "serve",
        "run one replica: the MCP endpoint, the poll loops, /healthz, /readyz and /metrics",
        configure_serve,
        run_serve,
    ),
    Command(
        "demo",
        "the local fleet: Azurite, the Graph emulator, 3 replicas, hosts printing deliveries",
        configure_demo,
        run_demo,
    ),
    Command(
        "emulator",
        "run the Microsoft Graph + Entra emulator (for local runs, compose and tests)",
        configure_emulator,
        run_emulator,
    ),
    Command(
        "repair-chat",
        "re-bootstrap one chat whose cursor is corrupt, as a first sight does (never replays history)",
        configure_repair_chat,
        run_repair_chat,
    ),
    Command(
        "doctor",
        "preflight the configured tenant, container and settings: one line per check, non-zero on a failure",
        lambda parser: None,
        run_doctor,
    ),
    Command(
        "signin",
        "delegated mode: a person signs the fleet in by device code (shows the code and page, waits)",
        configure_signin,
        run_signin,
    ),
    Command(
        "channel",
        "a stdio MCP server for one Claude Code host: the fleet's tools and pushes as a channel",
        configure_channel,
        run_channel,
    ),
    Command(
        "migrate",
        "copy local state directories into the configured backend (never deletes)",
        configure_migrate,
        run_migrate,
    ),
    Command(
        "persona",
        f"push persona-memory files to {PERSONA_PREFIX} or pull them back",
        configure_persona,
        run_persona,
    ),
)


def common_options(*, top_level: bool = False) -> argparse.ArgumentParser:
    """``--quiet`` and ``--debug``, accepted before or after any (sub)command name.

    Below the top level they default to SUPPRESS: argparse copies a subparser's defaults over the
    values already parsed, which would otherwise reset ``entrabot-fleet --debug migrate``.
    """
    default: Any = False if top_level else argparse.SUPPRESS
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument("--quiet", action="store_true", default=default, help="no progress bar")
    options.add_argument(
        "--debug",
        action="store_true",
        default=default,
        help="print a traceback on unexpected errors",
    )
    return options


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
        sub = subcommands.add_parser(
            command.name, parents=[common_options()], help=command.help, description=command.help
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


if __name__ == "__main__":
    sys.exit(main())

"""What every command shares: the exit codes, the two errors ``main`` turns into them, the command
entry, the ``--quiet``/``--debug`` options, and the settings and backend a command starts from."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from service.storage.errors import StorageError

if (
    TYPE_CHECKING
):  # imported where used: settings load pydantic, which --version and --help never need
    from service.config import Settings
    from service.storage.backend import MemoryBackend

PROG = "entrabot-fleet"
EXIT_OK, EXIT_FAILED, EXIT_CONFIG = 0, 1, 2


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


PROGRESS_COMMANDS = ("migrate", "persona")  # the commands that show a progress bar (on a terminal)
QUIET_HELP = {
    "top": f"no progress bar ({' and '.join(PROGRESS_COMMANDS)} show one on a terminal while they copy)",
    "progress": "no progress bar (shown on a terminal while files are copied)",
    # Accepted everywhere, so `entrabot-fleet --quiet CMD` and scripts keep working, but offered only
    # where it does something: its help once promised a bar no other command shows (issue 36).
    "none": argparse.SUPPRESS,
}


def common_options(*, top_level: bool = False, progress: bool = False) -> argparse.ArgumentParser:
    """``--quiet`` and ``--debug``, accepted before or after any (sub)command name.

    Below the top level they default to SUPPRESS: argparse copies a subparser's defaults over the
    values already parsed, which would otherwise reset ``entrabot-fleet --debug migrate``.
    """
    default: Any = False if top_level else argparse.SUPPRESS
    options = argparse.ArgumentParser(add_help=False)
    quiet_help = QUIET_HELP["top" if top_level else "progress" if progress else "none"]
    options.add_argument("--quiet", action="store_true", default=default, help=quiet_help)
    options.add_argument(
        "--debug",
        action="store_true",
        default=default,
        help="print a traceback on unexpected errors",
    )
    return options


def settings_or_exit(**overrides: object) -> Settings:
    """The settings from the environment and ``.env`` (``overrides``: a command's flags that are not
    None); a bad value is a one-line configuration error naming the variable and what to do."""
    from service.config import SettingsError, load_settings

    try:
        return load_settings(**overrides)
    except SettingsError as exc:
        raise ConfigurationError(settings_fix(str(exc))) from exc


def local_fleet_checked(replicas: int) -> None:
    """What a command starting a local fleet (``demo``, ``up``) checks before anything starts: a
    replica count, and the ENTRABOT_AZURITE* settings, each refused in one line."""
    from service.devstack.dev_environment import DevstackSettingsError, load_devstack_settings

    if replicas < 1:
        raise ConfigurationError("--replicas must be at least 1; pass --replicas 1 or more")
    try:
        load_devstack_settings()
    except DevstackSettingsError as exc:
        raise ConfigurationError(settings_fix(str(exc))) from None


def settings_fix(problem: str) -> str:
    """``problem`` with what to do about it. A rule between settings already says which to change
    ("… must be at most …; set …"); a single value's message says only what is wrong with it."""
    if ";" in problem:
        return problem
    return f"{problem}; fix it in the environment or in .env"


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

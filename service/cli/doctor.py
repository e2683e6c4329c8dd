"""``doctor``: preflight the configured tenant, container and settings."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from service.cli.common import EXIT_FAILED, EXIT_OK, Command, settings_or_exit
from service.cli.serve import CREATE_CONTAINER_HELP


def configure_doctor(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--create-container", action="store_true", help=CREATE_CONTAINER_HELP)


def run_doctor(args: argparse.Namespace) -> int:
    from service.doctor import run_doctor as doctor

    settings = settings_or_exit()
    _quiet_logging(debug=args.debug)
    passed = asyncio.run(doctor(settings, create_container=args.create_container))
    return EXIT_OK if passed else EXIT_FAILED


def _quiet_logging(*, debug: bool) -> None:
    """The report's lines are the doctor's output. Without a handler, Python prints a library's
    warning bare on stderr (its "last resort"), so a failed hop showed once in the report and again,
    unexplained, per attempt; ``--debug`` shows those records."""
    if debug:
        logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    else:
        logging.getLogger().addHandler(logging.NullHandler())


COMMAND = Command(
    "doctor",
    "preflight the configured tenant, container and settings: one line per check, non-zero on a failure",
    configure_doctor,
    run_doctor,
)

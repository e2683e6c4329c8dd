"""``doctor``: preflight the configured tenant, container and settings."""

from __future__ import annotations

import argparse
import asyncio

from service.cli.common import EXIT_FAILED, EXIT_OK, Command


def run_doctor(args: argparse.Namespace) -> int:
    from service.doctor import run_doctor as doctor

    return EXIT_OK if asyncio.run(doctor()) else EXIT_FAILED


COMMAND = Command(
    "doctor",
    "preflight the configured tenant, container and settings: one line per check, non-zero on a failure",
    lambda parser: None,
    run_doctor,
)

"""``demo``: the local fleet, printing what the hosts receive."""

from __future__ import annotations

import argparse
import asyncio

from service.cli.common import Command, ConfigurationError, settings_fix


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
    from service.devstack.dev_environment import DevstackSettingsError, load_devstack_settings

    if args.replicas < 1:
        raise ConfigurationError("--replicas must be at least 1")
    try:
        load_devstack_settings()  # before anything starts: a bad ENTRABOT_AZURITE* is one line
    except DevstackSettingsError as exc:
        raise ConfigurationError(settings_fix(str(exc))) from None
    return asyncio.run(demo(DemoOptions(replicas=args.replicas, duration_s=args.duration)))


COMMAND = Command(
    "demo",
    "the local fleet: Azurite, the Graph emulator, 3 replicas, hosts printing deliveries",
    configure_demo,
    run_demo,
)

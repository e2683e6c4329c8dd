"""``demo``: the local fleet, printing what the hosts receive."""

from __future__ import annotations

import argparse
import asyncio

from service.cli.common import Command, local_fleet_checked


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

    local_fleet_checked(args.replicas)
    return asyncio.run(demo(DemoOptions(replicas=args.replicas, duration_s=args.duration)))


COMMAND = Command(
    "demo",
    "the local fleet: Azurite, the Graph emulator, 3 replicas, hosts printing deliveries",
    configure_demo,
    run_demo,
)

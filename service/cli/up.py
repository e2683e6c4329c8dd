"""``up``: a local fleet for a developer's own agent, until Ctrl-C."""

from __future__ import annotations

import argparse
from pathlib import Path

from service.cli.common import Command, CommandFailed, local_fleet_checked


def configure_up(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--replicas", type=int, default=2, help="replicas in the local fleet (default 2)"
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="where the token, the state `say` reads and the logs go (default: "
        "$XDG_STATE_HOME/entrabot-fleet/local, else ~/.local/state/entrabot-fleet/local)",
    )


def run_up(args: argparse.Namespace) -> int:
    from service.devstack.azurite import AzuriteError
    from service.devstack.local_state import default_state_dir
    from service.devstack.local_up import FleetAlreadyRunning, UpOptions, run_up as up

    local_fleet_checked(args.replicas)
    state_dir = (args.state_dir or default_state_dir()).absolute()
    try:
        return up(UpOptions(replicas=args.replicas, state_dir=state_dir))
    except (FleetAlreadyRunning, AzuriteError) as exc:
        raise CommandFailed(str(exc)) from None


COMMAND = Command(
    "up",
    "a local fleet for your own agent until Ctrl-C: Azurite, the Graph emulator, 2 replicas, and the "
    "lines that connect Claude Code or Codex to it",
    configure_up,
    run_up,
)

"""``emulator``: the Microsoft Graph + Entra emulator."""

from __future__ import annotations

import argparse
from pathlib import Path

from service.cli.common import Command, ConfigurationError


def listen_port(text: str) -> int:
    """A TCP port, 0-65535 (0: the system picks a free one, and the first line says which)."""
    port = int(text) if text.isdigit() else -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0-65535)")
    return port


def configure_emulator(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--seed", type=Path, default=None, help="tenant seed JSON (default: the demo tenant)"
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    parser.add_argument(
        "--port",
        type=listen_port,
        default=8088,
        help="port to listen on (default 8088; 0: any free one)",
    )
    parser.add_argument(
        "--public-url", default=None, help="base URL clients reach it at (default: from requests)"
    )


def run_emulator(args: argparse.Namespace) -> int:
    from emulator.seed import demo_seed_path
    from emulator.server import ListenError, serve as serve_emulator

    seed = args.seed or demo_seed_path()
    if not Path(seed).is_file():
        raise ConfigurationError(
            f"--seed {seed}: no such file; pass --seed FILE or omit it for the demo tenant"
        )
    try:
        serve_emulator(seed, args.host, args.port, public_url=args.public_url)
    except ListenError as exc:
        raise ConfigurationError(str(exc)) from None
    return 0


COMMAND = Command(
    "emulator",
    "run the Microsoft Graph + Entra emulator (for local runs, compose and tests)",
    configure_emulator,
    run_emulator,
)

"""``serve``: run one replica."""

from __future__ import annotations

import argparse

from service.cli.common import Command, ConfigurationError


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


COMMAND = Command(
    "serve",
    "run one replica: the MCP endpoint, the poll loops, /healthz, /readyz and /metrics",
    configure_serve,
    run_serve,
)

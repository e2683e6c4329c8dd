"""``serve``: run one replica."""

from __future__ import annotations

import argparse

from service.cli.common import Command, ConfigurationError, settings_or_exit

CREATE_CONTAINER_HELP = (
    "create the Blob container ENTRABOT_BLOB_CONTAINER names if it does not exist (a local Azurite, a "
    "new account); without it a missing container stops the command"
)


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
    parser.add_argument("--create-container", action="store_true", help=CREATE_CONTAINER_HELP)


def run_serve(args: argparse.Namespace) -> int:
    from service.serve import ServeError, serve

    settings = settings_or_exit(host=args.host, port=args.port)
    try:
        return serve(settings, create_container=args.create_container, debug=args.debug)
    except ServeError as exc:
        raise ConfigurationError(str(exc)) from exc


COMMAND = Command(
    "serve",
    "run one replica: the MCP endpoint, the poll loops, /healthz, /readyz and /metrics",
    configure_serve,
    run_serve,
)

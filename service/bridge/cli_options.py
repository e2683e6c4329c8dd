"""The ``channel`` subcommand's arguments, and turning them into a running bridge."""

from __future__ import annotations

import argparse
import asyncio
import os

from service.bridge.config import (
    AFFINITY_ENV,
    AUDIENCE_ENV,
    FLEET_URL_ENV,
    HOST_ID_ENV,
    TOKEN_ENV,
    TOKEN_FILE_ENV,
)
from service.bridge.written_log import STATE_DIR_ENV


def add_channel_options(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Serve one MCP host (Claude Code) on stdin/stdout: the fleet's tools, and with --push its messages "
        f"as channel events. The token comes from {TOKEN_ENV} or {TOKEN_FILE_ENV}, or from Entra with "
        "--entra-audience; never from an argument."
    )
    # In the order --help lists them.
    _add_fleet_session_options(parser)
    _add_host_memory_options(parser)
    parser.add_argument(
        "--request-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how long one request to the fleet may take (default 60)",
    )
    # Claude Code shows every stderr line of a stdio server as "[ERROR] ... Server stderr", so by default
    # the bridge says only what needs attention (the fleet unreachable, a refusal).
    parser.add_argument(
        "--log-level",
        default="WARNING",
        help="stderr log level (default WARNING; INFO adds sessions opened and streams resumed)",
    )


def _add_fleet_session_options(parser: argparse.ArgumentParser) -> None:
    """Which fleet, what the session carries, and how the bridge presents itself to it."""
    parser.add_argument(
        "--fleet-url", metavar="URL", help=f"the fleet's /mcp endpoint (default: {FLEET_URL_ENV})"
    )
    parser.add_argument(
        "--push",
        action="store_true",
        help="ask the fleet for pushes; pair it with Claude Code's channels flag, or the events are dropped unseen",
    )
    parser.add_argument(
        "--permission-relay",
        action="store_true",
        help="relay Claude Code's permission prompts to the fleet (declared only if the fleet declares claude/channel/permission)",
    )
    parser.add_argument(
        "--entra-audience",
        metavar="AUDIENCE",
        help=f"acquire an Entra token for this audience with azure-identity (default: {AUDIENCE_ENV})",
    )
    parser.add_argument(
        "--affinity-key",
        metavar="KEY",
        help=f"the host-affinity header value (default: {AFFINITY_ENV}, else random per process)",
    )


def _add_host_memory_options(parser: argparse.ArgumentParser) -> None:
    """The host's identity, what the bridge remembers writing to it, and its acknowledgements."""
    parser.add_argument(
        "--state-dir",
        metavar="DIR",
        help=f"where the bridge remembers what it wrote to the host across restarts (default: "
        f"{STATE_DIR_ENV}, else $XDG_STATE_HOME/entrabot-bridge or ~/.local/state/entrabot-bridge)",
    )
    parser.add_argument(
        "--host-id",
        metavar="ID",
        help=f"this host's identity, naming its state file (default: {HOST_ID_ENV}, else derived "
        "from the fleet URL and the working directory)",
    )
    parser.add_argument(
        "--no-acknowledge",
        action="store_true",
        help="with --push, do not name this host to the fleet: it then neither acknowledges nor is "
        "owed anything, and a message is at most once after the claim (for comparison and "
        "diagnosis; the default acknowledges)",
    )


def run_channel_command(args: argparse.Namespace, config_error: type[Exception]) -> int:
    import dataclasses

    from service.bridge.config import BridgeConfigError, load_config
    from service.bridge.run import run_bridge, start_logging

    try:
        environ = {**os.environ, **({STATE_DIR_ENV: args.state_dir} if args.state_dir else {})}
        config = load_config(
            fleet_url=args.fleet_url,
            entra_audience=args.entra_audience,
            affinity_key=args.affinity_key,
            push=args.push,
            permission_relay=args.permission_relay,
            environ=environ,
            host_id=args.host_id,
        )
    except BridgeConfigError as exc:
        raise config_error(str(exc)) from exc
    if args.request_timeout <= 0:
        raise config_error("--request-timeout must be positive")
    config = dataclasses.replace(
        config,
        request_timeout_s=args.request_timeout,
        call_wait_s=min(config.call_wait_s, args.request_timeout),
        acknowledge=not args.no_acknowledge,
    )
    start_logging(args.log_level)
    return asyncio.run(run_bridge(config))

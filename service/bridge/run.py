"""``entrabot-fleet channel``: wire the host server and the fleet connection, serve until stdin closes."""

from __future__ import annotations

import asyncio
import logging
import sys

from mcp.server.stdio import stdio_server

from service.bridge.auth import build_token_provider
from service.bridge.config import BridgeConfig
from service.bridge.fleet_connection import FleetConnection
from service.bridge.host_server import HostServer
from service.telemetry.logging import configure_logging

# Loggers that would print URLs with query strings or MCP session ids at INFO.
_QUIET_LOGGERS = ("mcp", "httpx", "httpx2", "httpcore", "httpcore2", "azure")


async def run_bridge(config: BridgeConfig) -> int:
    """Serve one host on this process's stdin/stdout; returns the exit code when the host hangs up."""
    tokens = build_token_provider(config.credential)
    stop = asyncio.Event()
    fleet = FleetConnection(config, tokens)
    host = HostServer(fleet, permission_relay=config.permission_relay, dedupe_window=config.dedupe_window,
                      tools_wait_s=config.call_wait_s)
    fleet.listener = host
    log = logging.getLogger(__name__)
    log.info("channel bridge starting", extra={"push": config.push, "permission_relay": config.permission_relay})
    try:
        async with asyncio.TaskGroup() as group:
            fleet_task = group.create_task(fleet.run(stop), name="fleet")
            async with stdio_server() as (host_in, host_out):
                await host.serve(host_in, host_out)
            stop.set()
            await fleet_task
    finally:
        await tokens.aclose()
    log.info("channel bridge stopped: the host closed stdin", extra={"emitted": host.emitted,
                                                                    "duplicates_dropped": host.duplicates_dropped})
    return 0


def start_logging(level: str = "INFO") -> None:
    """JSON lines on stderr only: stdout carries the protocol and nothing else."""
    configure_logging(level, stream=sys.stderr)
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)

"""``entrabot-fleet channel``: wire the host server and the fleet connection, serve until stdin closes."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
import sys

from mcp.server.stdio import stdio_server

from service.bridge.auth import build_token_provider
from service.bridge.config import BridgeConfig
from service.bridge.fleet_connection import FleetConnection
from service.bridge.host_lock import lock_host_identity
from service.bridge.host_server import HostServer
from service.bridge.written_log import WrittenLog
from service.telemetry.logging import configure_logging

# Loggers that would print URLs with query strings or MCP session ids at INFO.
_QUIET_LOGGERS = ("mcp", "httpx", "httpx2", "httpcore", "httpcore2", "azure")


# Claude Code stops a stdio server with SIGINT and, 0.1 s later, SIGTERM, without closing its stdin
# (measured with Claude Code 2.1.332; TOOLCHAIN.md). Both signals end the bridge the way a closed
# stdin does, so the fleet session is closed (HTTP DELETE) instead of lingering until its idle
# timeout; the close is bounded so a hung fleet cannot keep the bridge alive.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
CLOSE_BOUND_S = 3.0


async def run_bridge(config: BridgeConfig) -> int:
    """Serve one host on this process's stdin/stdout until the host hangs up or signals; the exit code."""
    lock = lock_host_identity(config.state_dir, config.host_id)
    config = dataclasses.replace(config, host_id=lock.identity)
    tokens = build_token_provider(config.credential)
    stop = asyncio.Event()
    fleet = FleetConnection(config, tokens)
    written = (
        WrittenLog.open(config.state_dir, config.host_id, config.dedupe_window)
        if config.state_dir is not None
        else None
    )
    host = HostServer(
        fleet,
        permission_relay=config.permission_relay,
        dedupe_window=config.dedupe_window,
        tools_wait_s=config.call_wait_s,
        written=written,
    )
    fleet.listener = host
    log = logging.getLogger(__name__)
    log.debug(
        "channel bridge starting",
        extra={"push": config.push, "permission_relay": config.permission_relay},
    )
    signalled = _StopSignals()
    fleet_task = asyncio.create_task(fleet.run(stop), name="fleet")
    host_task = asyncio.create_task(_serve_host(host), name="host")
    try:
        signal_wait = asyncio.create_task(signalled.received.wait())
        await asyncio.wait({host_task, signal_wait}, return_when=asyncio.FIRST_COMPLETED)
        signal_wait.cancel()
        stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(fleet_task), CLOSE_BOUND_S)
        except TimeoutError:
            log.warning(
                "the fleet session did not close in time; exiting anyway",
                extra={"bound_s": CLOSE_BOUND_S},
            )
            fleet_task.cancel()
    finally:
        signalled.restore()
        await tokens.aclose()
        lock.release()
    why = f"signal {signalled.name}" if signalled.name else "the host closed stdin"
    log.info(
        "channel bridge stopped",
        extra={"why": why, "emitted": host.emitted, "duplicates_dropped": host.duplicates_dropped},
    )
    if signalled.name:
        # stdin is still open and the SDK's reader thread is blocked on it; a cancelled anyio thread
        # call waits for its thread, and so would the interpreter at exit. All that matters (the
        # session's DELETE, the log line) is done: leave now.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    await host_task  # the host closed stdin: its outcome, errors included
    return 0


async def _serve_host(host: HostServer) -> None:
    async with stdio_server() as (host_in, host_out):
        await host.serve(host_in, host_out)


class _StopSignals:
    """SIGINT and SIGTERM, caught on the event loop while the bridge runs."""

    def __init__(self) -> None:
        self.received = asyncio.Event()
        self.name: str | None = None
        loop = asyncio.get_running_loop()
        for number in STOP_SIGNALS:
            loop.add_signal_handler(number, self._caught, number)

    def _caught(self, number: int) -> None:
        if self.name is None:
            self.name = signal.Signals(number).name
        self.received.set()

    def restore(self) -> None:
        loop = asyncio.get_running_loop()
        for number in STOP_SIGNALS:
            loop.remove_signal_handler(number)


def start_logging(level: str = "INFO") -> None:
    """JSON lines on stderr only: stdout carries the protocol and nothing else."""
    configure_logging(level, stream=sys.stderr)
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)

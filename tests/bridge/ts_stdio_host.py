"""A host built on the TypeScript MCP SDK's stdio client (tests/mcp/ts-client) spawning the bridge."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tests.bridge.bridge_host import bridge_parameters


@asynccontextmanager
async def typescript_stdio_host(
    ts_client_dir: Path,
    fleet_url: str,
    stderr_path: Path,
    *,
    token: str,
    pushes: int,
    wait_s: float,
    tool: str,
    tool_args: dict[str, Any],
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``stdio_channel_client.mjs`` running ``entrabot-fleet channel --push``; it prints a "ready" line
    after listing the tools and calling ``tool``, and a "done" line after ``pushes`` channel events or
    ``wait_s``. The bridge's stderr lands in ``stderr_path``."""
    node = shutil.which("node")
    assert node is not None, "node is not installed"
    bridge = bridge_parameters(fleet_url, token=token)
    with open(stderr_path, "wb") as errlog:
        process = await asyncio.create_subprocess_exec(
            node,
            "stdio_channel_client.mjs",
            str(pushes),
            str(int(wait_s * 1000)),
            tool,
            json.dumps(tool_args),
            "--",
            bridge.command,
            *bridge.args,
            cwd=ts_client_dir,
            env=bridge.env,
            stdout=asyncio.subprocess.PIPE,
            stderr=errlog,
        )
        try:
            yield process
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()

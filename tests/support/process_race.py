"""Race several worker processes: start them all, wait until each says "ready", release them with one
"go" each, and collect the JSON object each prints last. Shared by the storage and ledger races."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any


async def race_processes(
    argvs: Sequence[Sequence[str]],
    *,
    env: Mapping[str, str],
    start_timeout_s: float,
    run_timeout_s: float,
) -> list[dict[str, Any]]:
    procs = [
        await asyncio.create_subprocess_exec(
            *argv,
            env=dict(env),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for argv in argvs
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            ready = await asyncio.wait_for(proc.stdout.readline(), start_timeout_s)
            assert ready.strip() == b"ready", ready
        for proc in procs:  # released together, so the writes really race
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            await proc.stdin.drain()
        outputs = await asyncio.wait_for(
            asyncio.gather(*(p.communicate() for p in procs)), run_timeout_s
        )
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    results = []
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err.decode(errors="replace")[-2000:]
        results.append(json.loads(out.decode().strip().splitlines()[-1]))
    return results

"""Replicas racing on one key, each a separate process with its own backend (SPEC §3)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from process_race import race_processes

from service.storage.backend import MemoryBackend

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("race_worker.py")
START_TIMEOUT_S = 60
RACE_TIMEOUT_S = 150


async def race(
    env: dict[str, str], task: str, key: str, workers: int, count: int
) -> list[dict[str, object]]:
    """Start ``workers`` processes, release them together, and return their results."""
    base = {name: value for name, value in os.environ.items() if not name.startswith("ENTRABOT_")}
    argvs = [[sys.executable, str(WORKER), task, key, f"w{n}", str(count)] for n in range(workers)]
    return await race_processes(
        argvs, env={**base, **env}, start_timeout_s=START_TIMEOUT_S, run_timeout_s=RACE_TIMEOUT_S
    )


async def test_compare_and_swap_increments_from_8_processes_never_lose_an_update(
    backend: MemoryBackend, backend_env: dict[str, str]
) -> None:
    await backend.write_text("counter", "0", if_absent=True)
    await race(backend_env, "cas", "counter", workers=8, count=50)
    assert await backend.read_text("counter") == "400"


async def test_if_absent_race_between_8_processes_has_exactly_one_winner(
    backend: MemoryBackend, backend_env: dict[str, str]
) -> None:
    results = await race(backend_env, "create", "poll_state/email_cursor.txt", workers=8, count=1)
    winners = [r["worker"] for r in results if r["won"]]
    assert len(winners) == 1
    assert await backend.read_text("poll_state/email_cursor.txt") == winners[0]


async def test_appends_from_4_processes_keep_every_line_whole_and_in_order(
    backend: MemoryBackend, backend_env: dict[str, str]
) -> None:
    await race(backend_env, "append", "interactions/2026-04-17.jsonl", workers=4, count=200)
    content = await backend.read_text("interactions/2026-04-17.jsonl")
    assert content is not None and content.endswith("\n")
    lines = content.splitlines()
    assert len(lines) == 800
    parsed = [re.fullmatch(r"(w\d) (\d{4}) x{40}", line) for line in lines]
    assert all(parsed), [line for line, match in zip(lines, parsed) if not match][:3]
    by_worker: dict[str, list[int]] = {}
    for match in parsed:
        assert match is not None
        by_worker.setdefault(match.group(1), []).append(int(match.group(2)))
    assert by_worker == {f"w{n}": list(range(200)) for n in range(4)}

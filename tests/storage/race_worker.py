"""One replica in a storage race, run as its own process by test_storage_races.py.

    python race_worker.py cas|create|append KEY WORKER_ID COUNT

It builds its backend from the ENTRABOT_* environment (as a replica does), prints ``ready``, waits for
a line on stdin so every racer starts together, runs its task and prints one JSON result line.
"""

from __future__ import annotations

import asyncio
import json
import sys

from service.config import Settings
from service.from_settings.storage import storage_options
from service.storage.backend import MemoryBackend
from service.storage.errors import ConcurrencyError, TransientStorageError
from service.storage.resolution import get_backend
from service.telemetry.metrics import StorageMetrics

MAX_ATTEMPTS_PER_INCREMENT = 2_000
SETTLE_READS = 3
SETTLE_PAUSE_S = 1.0


async def cas_increments(backend: MemoryBackend, key: str, count: int) -> dict[str, int]:
    conflicts = 0
    for _ in range(count):
        for _attempt in range(MAX_ATTEMPTS_PER_INCREMENT):
            content, etag = await backend.read_text_with_etag(key)
            if content is None or etag is None:
                raise SystemExit(f"{key} vanished during the race")
            try:
                await backend.write_text(key, str(int(content) + 1), if_match=etag)
                break
            except ConcurrencyError:
                conflicts += 1
        else:
            raise SystemExit(f"no increment landed in {MAX_ATTEMPTS_PER_INCREMENT} attempts")
    return {"conflicts": conflicts}


async def create_once(backend: MemoryBackend, key: str, worker: str) -> dict[str, bool]:
    try:
        await backend.write_text(key, worker, if_absent=True)
    except ConcurrencyError:
        return {"won": False}
    return {"won": True}


async def appends(backend: MemoryBackend, key: str, worker: str, count: int) -> dict[str, int]:
    settled = 0
    for i in range(count):
        line = f"{worker} {i:04d} {'x' * 40}\n"
        try:
            await backend.append_text(key, line)
        except TransientStorageError:
            # An append whose answer was lost (a slow Azurite under the whole suite): settled the way
            # the error says, by reading back; re-sent only when, after a pause for a late commit, the
            # line is still not there. The race is about whole, ordered lines, not about timeouts.
            settled += 1
            if not await _landed(backend, key, line):
                await backend.append_text(key, line)
    return {"appended": count, "settled_by_read_back": settled}


async def _landed(backend: MemoryBackend, key: str, line: str) -> bool:
    for _ in range(SETTLE_READS):
        await asyncio.sleep(SETTLE_PAUSE_S)
        content = await backend.read_text(key)
        if content is not None and line in content:
            return True
    return False


async def run(
    task: str, backend: MemoryBackend, key: str, worker: str, count: int
) -> dict[str, object]:
    if task == "cas":
        return dict(await cas_increments(backend, key, count))
    if task == "create":
        return dict(await create_once(backend, key, worker))
    if task == "append":
        return dict(await appends(backend, key, worker, count))
    raise SystemExit(f"unknown task {task!r}")


async def main(task: str, key: str, worker: str, count: int) -> None:
    settings = Settings(_env_file=None)  # the race's environment only
    backend = get_backend(storage_options(settings), metrics=StorageMetrics())
    try:
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        result = await run(task, backend, key, worker, count)
    finally:
        await backend.aclose()
    print(json.dumps({"worker": worker, **result}), flush=True)


if __name__ == "__main__":
    task_name, race_key, worker_id, how_many = sys.argv[1:5]
    asyncio.run(main(task_name, race_key, worker_id, int(how_many)))

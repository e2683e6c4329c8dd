"""The shared container: reachable, and read, write and compare-and-swap work on a scratch key.

The scratch key is fixed (one small blob, overwritten by every run) because the backend protocol has
no delete: the fleet never deletes state, and the doctor does not get a way to.
"""

from __future__ import annotations

import json
import time
from service.config import Settings
from service.from_settings.storage import storage_options
from service.doctor.report import Finding, fail, ok, skip
from service.graph.auth import TokenProvider, storage_token_provider
from service.storage.backend import MemoryBackend
from service.storage.errors import BackendMisconfiguredError, ConcurrencyError, StorageError
from service.storage.resolution import create_container_if_missing, get_backend
from service.telemetry.metrics import StorageMetrics

SCRATCH_KEY = "doctor/preflight.json"
_ADVICE = (
    "check ENTRABOT_BLOB_ENDPOINT and ENTRABOT_BLOB_CONTAINER, that the container exists, and that "
    "the fleet's identity holds Storage Blob Data Contributor on it (docs/azure.md)"
)


async def check_storage(
    settings: Settings,
    user_tokens: TokenProvider | None,
    *,
    by_agent_user: bool,
    create_container: bool = False,
) -> list[Finding]:
    if by_agent_user and user_tokens is None:
        return [
            skip(
                "storage",
                "not tried: ENTRABOT_BLOB_AUTH=agent_user and the agent user's tokens failed",
            )
        ]
    try:
        backend = get_backend(
            storage_options(settings),
            metrics=StorageMetrics(),
            storage_token_provider=storage_token_provider(user_tokens) if user_tokens else None,
        )
    except BackendMisconfiguredError as exc:
        return [fail("storage settings", str(exc))]
    findings = [ok("storage settings", backend.describe())]
    try:
        if create_container:
            findings += await _create(backend)
        findings += await _exercise(backend)
    finally:
        await backend.aclose()
    return findings


async def _create(backend: MemoryBackend) -> list[Finding]:
    check = "storage container (--create-container)"
    try:
        created = await create_container_if_missing(backend)
    except StorageError as exc:
        return [fail(check, f"could not create it: {type(exc).__name__}: {exc}")]
    return [
        ok(check, "created" if created else "already there (or a local store: nothing to create)")
    ]


async def _exercise(backend: MemoryBackend) -> list[Finding]:
    try:
        await backend.check()
    except StorageError as exc:
        return [
            fail("storage reachable", f"{type(exc).__name__}: {exc}; {_ADVICE}"),
            skip("storage read/write/CAS", "not tried: the container is unreachable"),
        ]
    findings = [ok("storage reachable", "the container answered")]

    # Each write carries a different body: a store whose ETag is a content hash would otherwise
    # hand back the same ETag, and the stale-ETag write below would prove nothing.
    def body(step: int) -> str:
        return json.dumps({"written_by": "entrabot-fleet doctor", "at": time.time(), "step": step})

    step = "read"
    try:
        _, etag = await backend.read_text_with_etag(SCRATCH_KEY)
        step = "write"
        if etag is None:
            try:
                etag = await backend.write_text(SCRATCH_KEY, body(0), if_absent=True)
            except ConcurrencyError:  # another doctor created it first: read its ETag instead
                _, etag = await backend.read_text_with_etag(SCRATCH_KEY)
        step = "compare-and-swap"
        written = body(1)
        new_etag = await backend.write_text(SCRATCH_KEY, written, if_match=etag)
        step = "read back"
        content, read_etag = await backend.read_text_with_etag(SCRATCH_KEY)
    except ConcurrencyError:
        return [
            *findings,
            fail(
                "storage read/write/CAS",
                f"the {step} on {SCRATCH_KEY} lost a race; another "
                "doctor may be running, try again",
            ),
        ]
    except StorageError as exc:
        return [
            *findings,
            fail(
                "storage read/write/CAS",
                f"the {step} on {SCRATCH_KEY} failed: {type(exc).__name__}: {exc}; {_ADVICE}",
            ),
        ]
    if content != written or read_etag != new_etag:
        return [
            *findings,
            fail(
                "storage read/write/CAS",
                f"{SCRATCH_KEY} read back differs from what was "
                "written; the store does not honour ETags",
            ),
        ]
    try:
        await backend.write_text(SCRATCH_KEY, body(2), if_match=etag)
    except ConcurrencyError:
        return [
            *findings,
            ok("storage read/write/CAS", f"{SCRATCH_KEY}: written, read back, stale ETag refused"),
        ]
    except StorageError as exc:
        return [
            *findings,
            fail(
                "storage read/write/CAS",
                f"the stale-ETag write failed oddly: {type(exc).__name__}: {exc}",
            ),
        ]
    return [
        *findings,
        fail(
            "storage read/write/CAS",
            "a write with a stale ETag succeeded: the store does not "
            "honour If-Match, so claims would not be exclusive; do not run the fleet on it",
        ),
    ]

"""The local stack's child processes: waiting until one answers over HTTP, and stopping it (SIGTERM, a
bounded wait, then SIGKILL)."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable

import httpx


def terminate(proc: subprocess.Popen, timeout: float) -> float:  # type: ignore[type-arg]
    """SIGTERM ``proc`` and wait up to ``timeout`` s, else SIGKILL it; returns how long it took."""
    began = time.monotonic()
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return time.monotonic() - began


def wait_until_answering(
    url: str,
    proc: subprocess.Popen,  # type: ignore[type-arg]
    *,
    what: str,
    timeout: float,
    log_tail: Callable[[], str],
) -> None:
    """Poll ``url`` until it answers 200; raise naming ``what`` and showing its log when ``proc`` exits
    first or ``timeout`` s pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited during start-up; its log:\n{log_tail()}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{what} was not ready within {timeout:.0f} s; its log:\n{log_tail()}")

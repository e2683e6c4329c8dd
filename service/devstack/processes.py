"""Stopping the local stack's child processes: SIGTERM, a bounded wait, then SIGKILL."""

from __future__ import annotations

import signal
import subprocess
import time


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

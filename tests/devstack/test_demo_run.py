"""``entrabot-fleet demo`` as a real process: its closing account adds up, every push explained, and
every push acknowledged by its host as the fleet counts it (its /metrics)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.azurite]


def test_the_demo_accounts_for_every_push_it_printed(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ENTRABOT_", "AZURE_"))}
    result = subprocess.run(
        [sys.executable, "-m", "service.cli", "demo", "--replicas", "1", "--duration", "12"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    head = re.search(
        r"Sent (\d+) chat messages and (\d+) mails; delivered (\d+) pushes \((\d+) distinct, "
        r"(\d+) duplicated\):",
        out,
    )
    assert head, out[-2000:]
    chats, mails, pushes, distinct, duplicated = map(int, head.groups())
    assert duplicated == 0 and distinct == pushes
    sent = re.search(r"^  (\d+) of the (\d+) sent$", out, re.MULTILINE)
    assert sent and int(sent.group(2)) == chats + mails
    seeded = re.search(r"^  (\d+) from the seeded history: on first sight", out, re.MULTILINE)
    late = re.search(r"^  (\d+) sent but not polled before the stop", out, re.MULTILINE)
    surfaced = int(seeded.group(1)) if seeded else 0
    # Every push is one the demo sent or a seeded message a first sight surfaced. The demo talks only
    # once the fleet has seen every chat, so no message it sends meets the first-sight rule (only a
    # chat's newest surfaces), and the drain outlasts a few polls: every sent one arrives.
    assert pushes == int(sent.group(1)) + surfaced
    assert late is None and int(sent.group(1)) == chats + mails, out[-2000:]
    acknowledged = re.search(
        r"^  (\d+) of the (\d+) distinct acknowledged by their host", out, re.MULTILINE
    )
    assert (
        acknowledged and int(acknowledged.group(1)) == int(acknowledged.group(2)) == distinct > 0
    ), out[-2000:]
    assert "DUPLICATE" not in out
    # Each delivery line names its message, so the same text twice reads as two messages.
    printed = re.findall(r"^\d\d:\d\d:\d\d  \S+ → \S+  (?:mail|chat \S+)  msg (\S+)  ", out, re.M)
    assert len(printed) == pushes and len(set(printed)) == distinct, out[-2000:]

"""The README's local recipe ("A local fleet first"), read as the commands a reader would type.

The README writes the checkout's ``.venv/bin/entrabot-fleet`` (what ``make setup`` installs, ``pip
install -e``: the checkout's own code); a test runs the same command as this interpreter with ``-m
service.cli``, which is that code under the interpreter running the tests.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
README = REPO_ROOT / "README.md"
VENV_FLEET = ".venv/bin/entrabot-fleet"
_FENCE = re.compile(r"```sh\n(.*?)```", re.S)


def local_section() -> str:
    text = README.read_text()
    start = text.index("### A local fleet first")
    return text[start : text.index("\n### ", start + 1)]


def shell_lines() -> list[str]:
    """Every line of the section's ``sh`` blocks."""
    return [line for block in _FENCE.findall(local_section()) for line in block.splitlines()]


def up_invocation() -> list[str]:
    """The ``up`` command the section names in its first sentence (``make up`` runs it)."""
    match = re.search(r"`(\.venv/bin/entrabot-fleet up[^`]*)`", local_section())
    assert match, "the README's local recipe names no `.venv/bin/entrabot-fleet up`"
    return shlex.split(match.group(1))


def fleet_commands() -> list[list[str]]:
    """The section's ``entrabot-fleet`` commands, split as a shell would."""
    return [shlex.split(line) for line in shell_lines() if line.startswith(VENV_FLEET + " ")]


def claude_lines() -> list[str]:
    return [line for line in shell_lines() if line.startswith("claude ")]


def as_run_here(argv: list[str]) -> list[str]:
    assert argv[0] == VENV_FLEET, argv
    return [sys.executable, "-m", "service.cli", *argv[1:]]

"""``--quiet`` is offered only where there is a progress bar to silence (issue 36: its help promised a
bar that serve, doctor, demo and the others never show). The CLI runs as a process."""

from __future__ import annotations

import subprocess
import sys

import pytest


def help_of(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "service.cli", *args, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("command", ["migrate", "persona"])
def test_commands_that_copy_offer_quiet_for_their_progress_bar(command: str) -> None:
    flat = " ".join(help_of(command).split())
    assert "--quiet no progress bar (shown on a terminal while files are copied)" in flat


@pytest.mark.parametrize("command", ["serve", "doctor", "demo", "emulator", "channel", "signin"])
def test_commands_without_a_progress_bar_do_not_offer_quiet(command: str) -> None:
    text = help_of(command)
    assert "--debug" in text and "--quiet" not in text and "progress" not in text


def test_the_top_level_help_names_the_commands_with_a_bar() -> None:
    flat = " ".join(help_of().split())
    assert (
        "--quiet no progress bar (migrate and persona show one on a terminal while they copy)"
        in flat
    )


def test_quiet_is_still_accepted_by_every_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "service.cli", "doctor", "--quiet", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr

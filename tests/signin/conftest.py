"""One emulator per test module, its device codes polled every second (sign_in_kit.delegated_seed)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sign_in_kit import delegated_seed

from emulator.server import RunningEmulator, start_emulator


@pytest.fixture(scope="module")
def emulator() -> Iterator[RunningEmulator]:
    with start_emulator(delegated_seed(chats=1)) as running:
        yield running

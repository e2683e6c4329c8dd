"""A replica's chat reads are spaced by its share of the fleet's budget, which follows the roster."""

from __future__ import annotations

import pytest

from service.workers.read_pacer import FLEET_READS_PER_S, ReadPacer


class Time:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


async def test_reads_are_spaced_by_the_replicas_share_of_the_fleet_budget() -> None:
    time, readers = Time(), [3]
    pacer = ReadPacer(lambda: readers[0], monotonic=time.monotonic, sleep=time.sleep)
    for _ in range(4):
        await pacer.wait()
    gap = 3 / FLEET_READS_PER_S
    assert time.slept == pytest.approx([gap, 2 * gap, 3 * gap])  # the first goes at once
    readers[0] = 1
    time.now += 10  # idle for a while: no debt carried over
    await pacer.wait()
    await pacer.wait()
    assert time.slept[3:] == pytest.approx([1 / FLEET_READS_PER_S])

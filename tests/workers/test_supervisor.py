import asyncio

from service.telemetry.metrics import LoopMetrics
from service.workers.supervisor import LoopState, Supervisor

WAIT_BOUND_S = 10.0  # every wait here ends by itself well within this bound


async def test_loops_run_until_stop_and_end_stopped():
    metrics = LoopMetrics()
    sup = Supervisor(metrics=metrics)
    counts = {"a": 0, "b": 0}

    async def cycle_a():
        counts["a"] += 1
        if counts["a"] == 3:
            sup.stop()

    async def cycle_b():
        counts["b"] += 1

    sup.add("a", cycle_a, interval_s=0.01)
    sup.add("b", cycle_b, interval_s=0.01)
    await asyncio.wait_for(sup.run(), timeout=10)
    assert counts["a"] == 3 and counts["b"] >= 1
    assert [s.state for s in sup.statuses] == [LoopState.STOPPED, LoopState.STOPPED]
    assert metrics.loop_up.labels("a")._value.get() == 0


async def test_a_crashed_loop_is_visible_and_does_not_stop_the_others():
    metrics = LoopMetrics()
    sup = Supervisor(metrics=metrics)
    seen = []

    async def broken():
        raise RuntimeError("bug")

    async def healthy():
        seen.append(1)
        if len(seen) == 5:
            sup.stop()

    sup.add("broken", broken, interval_s=0.01)
    sup.add("healthy", healthy, interval_s=0.01)
    await asyncio.wait_for(sup.run(), timeout=10)
    broken_status, healthy_status = sup.statuses
    assert broken_status.state is LoopState.FAILED
    assert broken_status.error is not None and "RuntimeError: bug" in broken_status.error
    assert healthy_status.state is LoopState.STOPPED and len(seen) == 5
    assert metrics.loop_cycles.labels("broken", "crashed")._value.get() == 1


class SleepProbe:
    """A ``wake`` for the supervisor that reports each time the loop goes to sleep, and ends the sleep
    only when the test says so: the test synchronizes on the loop's own steps, not on the clock."""

    def __init__(self) -> None:
        self.asleep = asyncio.Event()
        self.woken = asyncio.Event()

    async def wake(self) -> None:
        self.asleep.set()
        await self.woken.wait()

    async def next_sleep(self) -> None:
        await asyncio.wait_for(self.asleep.wait(), WAIT_BOUND_S)
        self.asleep.clear()


async def test_wake_ends_the_sleep_early():
    sup = Supervisor(LoopMetrics())
    probe = SleepProbe()
    runs = []

    async def cycle():
        runs.append(1)
        if len(runs) == 2:
            sup.stop()

    sup.add("idle", cycle, interval_s=3600, wake=probe.wake)
    task = asyncio.create_task(sup.run())
    await probe.next_sleep()
    assert len(runs) == 1
    probe.woken.set()
    await asyncio.wait_for(task, timeout=WAIT_BOUND_S)
    assert len(runs) == 2


async def test_stop_interrupts_a_long_sleep():
    sup = Supervisor(LoopMetrics())
    probe = SleepProbe()  # never woken: only stop() can end the sleep

    async def cycle():
        return None

    sup.add("slow", cycle, interval_s=3600, wake=probe.wake)
    task = asyncio.create_task(sup.run())
    await probe.next_sleep()
    sup.stop()
    await asyncio.wait_for(task, timeout=WAIT_BOUND_S)
    assert sup.statuses[0].state is LoopState.STOPPED


async def test_a_first_delay_postpones_only_the_first_cycle():
    sup = Supervisor(LoopMetrics())
    probe = SleepProbe()
    runs = []

    async def cycle():
        runs.append(1)
        probe.woken.clear()  # from here on only the interval (10 ms) can end a sleep, not the probe
        if len(runs) == 3:
            sup.stop()

    sup.add("delayed", cycle, interval_s=0.01, first_after_s=3600, wake=probe.wake)
    task = asyncio.create_task(sup.run())
    await probe.next_sleep()
    assert runs == []  # asleep in the first delay before any cycle ran
    probe.woken.set()  # end the hour-long first delay
    # The second and third cycles follow at the interval: were the first delay applied again, the
    # loop would sleep an hour and this wait would fail.
    await asyncio.wait_for(task, WAIT_BOUND_S)
    assert runs == [1, 1, 1]

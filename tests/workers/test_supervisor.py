import asyncio

from service.telemetry.metrics import Metrics
from service.workers.supervisor import LoopState, Supervisor


async def test_loops_run_until_stop_and_end_stopped():
    metrics = Metrics()
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
    metrics = Metrics()
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
    assert broken_status.state is LoopState.FAILED and "RuntimeError: bug" in broken_status.error
    assert healthy_status.state is LoopState.STOPPED and len(seen) == 5
    assert metrics.loop_cycles.labels("broken", "crashed")._value.get() == 1


async def test_wake_ends_the_sleep_early():
    sup = Supervisor()
    woken = asyncio.Event()
    runs = []

    async def cycle():
        runs.append(1)
        if len(runs) == 2:
            sup.stop()

    async def wake():
        await woken.wait()

    sup.add("idle", cycle, interval_s=3600, wake=wake)
    task = asyncio.create_task(sup.run())
    for _ in range(100):
        if runs:
            break
        await asyncio.sleep(0.01)
    woken.set()
    await asyncio.wait_for(task, timeout=10)
    assert len(runs) == 2


async def test_stop_interrupts_a_long_sleep():
    sup = Supervisor()

    async def cycle():
        return None

    sup.add("slow", cycle, interval_s=3600)
    task = asyncio.create_task(sup.run())
    await asyncio.sleep(0.05)
    sup.stop()
    await asyncio.wait_for(task, timeout=5)
    assert sup.statuses[0].state is LoopState.STOPPED


async def test_a_first_delay_postpones_only_the_first_cycle():
    sup = Supervisor()
    runs = []

    async def cycle():
        runs.append(1)

    sup.add("delayed", cycle, interval_s=0.01, first_after_s=3600)
    task = asyncio.create_task(sup.run())
    await asyncio.sleep(0.1)
    sup.stop()
    await asyncio.wait_for(task, 5)
    assert runs == []

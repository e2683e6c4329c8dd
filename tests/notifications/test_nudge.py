"""Wake-ups for the loops: a nudge set while nobody waits is not lost, a mail notification wakes the
email poll now and once more after the settle margin (after the last of a burst), and ``first_of``
returns on either wake."""

from __future__ import annotations

import asyncio

from service.notifications.nudge import Nudge, first_of

BOUND_S = 10.0


async def test_a_nudge_set_while_nobody_waits_wakes_the_next_wait() -> None:
    nudge = Nudge()
    nudge.set()
    await asyncio.wait_for(nudge.wait(), BOUND_S)
    waiting = asyncio.ensure_future(nudge.wait())
    await asyncio.sleep(0)
    assert not waiting.done()  # consumed: the next wait waits
    waiting.cancel()


async def test_a_burst_is_followed_by_one_more_wake_after_its_last_call() -> None:
    nudge = Nudge()
    nudge.set_now_and_after(0.05)
    nudge.set_now_and_after(0.05)
    await asyncio.wait_for(nudge.wait(), BOUND_S)  # now
    await asyncio.wait_for(nudge.wait(), BOUND_S)  # and once more, later


async def test_first_of_returns_on_either_wake() -> None:
    quiet, loud = Nudge(), Nudge()
    wake = first_of(quiet.wait, loud.wait)
    loud.set()
    await asyncio.wait_for(wake(), BOUND_S)
    quiet.set()
    await asyncio.wait_for(wake(), BOUND_S)

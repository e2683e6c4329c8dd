"""SponsorWaitTarget's rules: what one hand-over has room for, and when it is complete."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest

from service.delivery.hub import Handover
from service.domain.message import InboundMessage, Source
from service.tools.message_items import MAX_ITEM_CHARS
from service.tools.sponsor_wait_target import BACKLOG_GRACE, BacklogBounds, SponsorWaitTarget

BEGAN = datetime(2026, 12, 2, 12, 0, tzinfo=timezone.utc)


def sponsor(mid: str, *, minutes: float, body: str = "hi") -> InboundMessage:
    """A sponsor's chat message written ``minutes`` after the wait began (negative: before it)."""
    return InboundMessage(
        Source.CHAT,
        "19:c@thread.v2",
        mid,
        "ada",
        "Ada",
        BEGAN + timedelta(minutes=minutes),
        body,
        sender_is_sponsor=True,
    )


def target(**bounds: int) -> SponsorWaitTarget:
    return SponsorWaitTarget("s1", began=BEGAN, bounds=BacklogBounds(**bounds), handoff_s=0.05)


def test_backlog_is_what_was_written_before_the_wait_less_the_calls_way_there() -> None:
    wait = target()
    assert wait.is_backlog(sponsor("1", minutes=-120))
    assert not wait.is_backlog(
        InboundMessage(
            Source.CHAT,
            "c",
            "2",
            "ada",
            "Ada",
            BEGAN - BACKLOG_GRACE / 2,
            "",
            sender_is_sponsor=True,
        )
    )
    assert not wait.is_backlog(sponsor("3", minutes=1))


def test_a_hand_over_has_room_for_the_bounded_backlog_and_one_reply() -> None:
    wait = target(max_items=2)
    old = [sponsor(str(n), minutes=-60 + n) for n in range(3)]
    assert wait.room_for(old[0], []) and wait.room_for(old[1], old[:1])
    assert not wait.room_for(old[2], old[:2])  # the item bound
    reply, second = sponsor("r", minutes=1), sponsor("r2", minutes=2)
    assert wait.room_for(reply, old[:2])  # the reply has its own place beside a full backlog
    assert not wait.room_for(second, [reply])


def test_the_text_bound_counts_what_each_item_carries() -> None:
    wait = target(max_chars=MAX_ITEM_CHARS)
    huge = sponsor(
        "1", minutes=-30, body="x" * (MAX_ITEM_CHARS * 3)
    )  # carried cut to MAX_ITEM_CHARS
    assert wait.room_for(huge, [])
    assert not wait.room_for(sponsor("2", minutes=-20, body="y"), [huge])
    with pytest.raises(ValueError, match="at least one backlog item"):
        BacklogBounds(max_chars=MAX_ITEM_CHARS - 1)


async def test_the_hand_over_waits_for_every_allotted_message_then_takes_nothing_more() -> None:
    wait = target()
    first, second = sponsor("1", minutes=-30), sponsor("2", minutes=-20)
    wait.allotted([first, second], [])
    handing = asyncio.create_task(wait.handed_over(30))
    assert await wait.deliver(first) is Handover.TAKEN
    await asyncio.sleep(0)
    assert not handing.done()  # the second is claimed and on its way
    assert await wait.deliver(second) is Handover.TAKEN
    assert await asyncio.wait_for(handing, 5) == [first, second]
    assert not wait.is_alive() and await wait.deliver(sponsor("3", minutes=1)) is Handover.NOT_TAKEN


async def test_an_allotted_message_that_never_comes_holds_the_hand_over_only_for_its_bound() -> (
    None
):
    wait = target()
    came, lost = (
        sponsor("1", minutes=-30),
        sponsor("2", minutes=-20),
    )  # another replica claimed the second
    wait.allotted([came, lost], [])
    await wait.deliver(came)
    assert await asyncio.wait_for(wait.handed_over(30), 5) == [came]


async def test_a_wait_with_nothing_handed_over_ends_at_its_timeout_with_nothing() -> None:
    wait = target()
    assert await wait.handed_over(0.05) == []
    assert not wait.is_alive()


def test_backlog_left_without_room_is_remembered_for_the_result() -> None:
    wait = target(max_items=1)
    wait.allotted(
        [sponsor("1", minutes=-30)], [sponsor("r", minutes=1)]
    )  # a second reply: not backlog
    assert not wait.left_out
    wait.allotted([], [sponsor("2", minutes=-20)])
    assert wait.left_out

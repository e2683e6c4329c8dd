"""The demo talks only once the fleet has a cursor for every chat and the mailbox: a message sent
before a chat's first sight would meet the first-sight rule (only the newest surfaces)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from service.devstack.demo import FleetNotReady, first_sight


@dataclass
class Ledger:
    """The ledger as the demo reads it, counting its reads; cursors appear after ``appear_after`` reads."""

    chats: int
    mailbox: bool
    appear_after: int = 0
    reads: int = 0

    async def chat_cursor_count(self) -> int:
        self.reads += 1
        return self.chats if self.reads > self.appear_after else 0

    async def has_email_cursor(self) -> bool:
        return self.mailbox


async def test_it_waits_until_every_chat_and_the_mailbox_have_a_cursor() -> None:
    ledger = Ledger(chats=3, mailbox=True, appear_after=2)
    await first_sight(ledger, 3, asyncio.Event(), timeout_s=10, margin_s=0)
    assert ledger.reads == 3


async def test_a_fleet_that_never_sees_the_mailbox_is_named_as_not_ready() -> None:
    with pytest.raises(FleetNotReady, match=r"3 of the 3 chats and not of the mailbox within 0 s"):
        await first_sight(
            Ledger(chats=3, mailbox=False), 3, asyncio.Event(), timeout_s=0.3, margin_s=0
        )


async def test_a_missing_chat_is_counted_in_the_message() -> None:
    with pytest.raises(FleetNotReady, match=r"first sight of 2 of the 3 chats within"):
        await first_sight(
            Ledger(chats=2, mailbox=True), 3, asyncio.Event(), timeout_s=0.3, margin_s=0
        )


async def test_a_stop_while_waiting_ends_the_wait_without_an_error() -> None:
    stop = asyncio.Event()
    stop.set()
    ledger = Ledger(chats=0, mailbox=False)
    await first_sight(ledger, 3, stop, timeout_s=10, margin_s=0)
    assert ledger.reads == 0

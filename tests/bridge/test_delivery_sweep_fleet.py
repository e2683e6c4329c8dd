"""The delivery sweep through processes (issue 22): what a host that went away is owed moves, once, to
another live host of the agent, which writes it to its host's stdin once and acknowledges it; the first
host coming back does not get it again; and the sweep's lease holder SIGKILLed just before the move is
replaced after the lease, the move still made once.

Three replica processes on Azurite and the Graph emulator; two channel bridges with ``--push``, hosts A
and B of one agent, each behind a loopback balancer of its own pinned to one replica, neither of them
the sweep's holder. Host A's connection first dies silently (what the replica sends it vanishes, as on a
network that went away) while a message is claimed for it, then goes away altogether: the replica keeps
A's session until its idle timeout, and only A's push stream tells it A is gone. Then the sweep's holder
is SIGKILLed and host B connects; a move before then had no live host to go to.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from functools import partial
from pathlib import Path

import pytest
from eventually import SLOW_POLL_S, SLOW_WAIT_S, eventually

from service.bridge.config import HOST_ID_ENV
from service.bridge.written_log import STATE_DIR_ENV
from service.delivery.host_record import HostRecord
from service.devstack.azurite import Azurite
from service.devstack.fleet import DEV_TOKEN, ReplicaProcess
from service.devstack.traffic import Posted
from service.workers.delivery_sweep import ROLE as SWEEP_ROLE
from tests.bridge.bridge_host import Received, bridge_host
from tests.bridge.fleet_stack import BridgeFleet, bridge_fleet
from tests.bridge.tcp_balancer import tcp_balancer

pytestmark = [pytest.mark.slow, pytest.mark.fleet, pytest.mark.azurite]

ENV = {
    "ENTRABOT_CHAT_POLL_INTERVAL_S": "1.0",
    "ENTRABOT_CHAT_POLL_JITTER_S": "0.2",
    "ENTRABOT_EMAIL_POLL_INTERVAL_S": "5.0",
    "ENTRABOT_DELIVERY_REDELIVER_AFTER_S": "2",
    "ENTRABOT_DELIVERY_MOVE_AFTER_S": "5",
    "ENTRABOT_DELIVERY_SWEEP_INTERVAL_S": "1",
    "ENTRABOT_DELIVERY_SWEEP_LEASE_TTL_S": "6",
    "ENTRABOT_DELIVERY_REFRESH_S": "2",
}
SETTLE_S = 5.0  # longer than two refreshes and a redelivery: a push that should not come would show by then
MOVED_LOG = "owed messages moved to another live host"


def _key(posted: Posted) -> tuple[str, str]:
    return (posted.chat_id, posted.message_id)


def _keys(received: Received) -> list[tuple[str, str]]:
    return [(str(p["meta"]["chat_id"]), str(p["meta"]["message_id"])) for p in received.channel]


async def _post(stack: BridgeFleet, chat: int, body: str) -> Posted:
    chat_id, members = stack.chats()[chat]
    sender = stack.seed.find_user(members[0])
    assert sender is not None
    return await stack.traffic.post_chat(sender, chat_id, body)


async def _record(stack: BridgeFleet, host_id: str) -> HostRecord:
    record = await eventually(
        lambda: stack.ledger.host_record(host_id),
        f"the record of {host_id}",
        timeout_s=SLOW_WAIT_S,
        poll_s=SLOW_POLL_S,
    )
    assert isinstance(record, HostRecord)
    return record


async def _held_by(stack: BridgeFleet, host_id: str, replica: ReplicaProcess) -> HostRecord:
    async def held() -> HostRecord | None:
        record = await stack.ledger.host_record(host_id)
        holder = record.held_by if record else None
        return (
            record
            if holder is not None and holder.active and holder.replica == replica.name
            else None
        )

    found = await eventually(
        held, f"{host_id} held by {replica.name}", timeout_s=SLOW_WAIT_S, poll_s=SLOW_POLL_S
    )
    assert isinstance(found, HostRecord)
    return found


@pytest.mark.timeout(240)
async def test_what_a_host_that_went_away_is_owed_moves_once_to_another_host_through_a_sweeper_kill(
    azurite: Azurite, tmp_path: Path
) -> None:
    host_a = {HOST_ID_ENV: "host-a", STATE_DIR_ENV: str(tmp_path / "host-a-state")}
    host_b = {HOST_ID_ENV: "host-b", STATE_DIR_ENV: str(tmp_path / "host-b-state")}
    async with bridge_fleet(azurite, tmp_path / "fleet", replicas=3, chats=3, env=ENV) as stack:
        lease = await eventually(
            lambda: stack.ledger.lease(SWEEP_ROLE),
            "the sweep's lease taken",
            timeout_s=SLOW_WAIT_S,
            poll_s=SLOW_POLL_S,
        )
        sweeper = next(m for m in stack.fleet.members if m.name == lease.holder)
        serves_a, serves_b = (m for m in stack.fleet.members if m is not sweeper)
        async with tcp_balancer([("127.0.0.1", serves_b.port)]) as to_b, AsyncExitStack() as hosts:
            # Host A, alone: what is claimed now is claimed for it.
            a_network, a_bridge = AsyncExitStack(), AsyncExitStack()
            to_a = await a_network.enter_async_context(tcp_balancer([("127.0.0.1", serves_a.port)]))
            _, a_first = await a_bridge.enter_async_context(
                bridge_host(to_a.url(), tmp_path / "a1.log", token=DEV_TOKEN, env=host_a)
            )
            await stack.wait_bootstrapped()
            await _held_by(stack, "host-a", serves_a)

            to_a.swallow_replies()  # A's connection dies silently: the pushes the replica makes vanish
            owed = await _post(stack, 0, "owed to host A")
            await eventually(
                lambda: _owes(stack, "host-a", _key(owed)),
                "the message owed to host A",
                timeout_s=SLOW_WAIT_S,
                poll_s=SLOW_POLL_S,
            )
            await (
                a_network.aclose()
            )  # and then A's network is gone: its session stays on the replica
            await a_bridge.aclose()
            await eventually(
                lambda: _unheld(stack, "host-a"),
                "host A no longer held",
                timeout_s=SLOW_WAIT_S,
                poll_s=SLOW_POLL_S,
            )
            sweeper.kill()  # the sweep's holder dies before the move is due (MOVE_AFTER_S from now)
            assert sweeper.proc is not None and sweeper.proc.returncode == -9
            # Host B, a live host of the same agent, for the sweep to move it to.
            _, b = await hosts.enter_async_context(
                bridge_host(to_b.url(), tmp_path / "b.log", token=DEV_TOKEN, env=host_b)
            )
            await _held_by(stack, "host-b", serves_b)

            await eventually(
                lambda: _key(owed) in _keys(b),
                "the moved message on host B's stdin",
                timeout_s=SLOW_WAIT_S,
            )
            await eventually(
                lambda: _acked(stack, "host-b", _key(owed)),
                "host B's acknowledgement in its record",
                timeout_s=SLOW_WAIT_S,
                poll_s=SLOW_POLL_S,
            )
            a_record = await _record(stack, "host-a")
            assert a_record.pending == () and _key(owed) in a_record.moved
            successor = await stack.ledger.lease(SWEEP_ROLE)
            assert (
                successor is not None
                and successor.holder != sweeper.name
                and successor.epoch > lease.epoch
            )
            moves = [
                m.name
                for m in stack.fleet.members
                for line in m.log_path.read_text().splitlines()
                if MOVED_LOG in line
            ]
            assert moves == [successor.holder], (
                moves
            )  # one move, by the replica that took the role over
            assert _key(owed) not in _keys(a_first)

            # Host A comes back (a new bridge, its host id and state folder), beside B: not given it again.
            _, a_back = await hosts.enter_async_context(
                bridge_host(to_b.url(), tmp_path / "a2.log", token=DEV_TOKEN, env=host_a)
            )
            await _held_by(stack, "host-a", serves_b)
            await asyncio.sleep(SETTLE_S)
            assert _key(owed) not in _keys(a_back)
            assert _keys(b).count(_key(owed)) == 1, _keys(b)

            # Further traffic: each message on one host's stdin once; with both hosts on one replica,
            # two fresh chats go one to each.
            later = [await _post(stack, 1, "later one"), await _post(stack, 2, "later two")]
            keys = {_key(p) for p in later}
            await eventually(
                lambda: keys <= set(_keys(a_back) + _keys(b)),
                "the later messages on the hosts",
                timeout_s=SLOW_WAIT_S,
            )
            await asyncio.sleep(SETTLE_S)
            everything = _keys(a_back) + _keys(b)
            assert sorted(everything) == sorted([_key(owed), *keys]), everything
            assert len(set(_keys(a_back)) & keys) == 1 and len(set(_keys(b)) & keys) == 1
            for host_id, received in (("host-a", a_back), ("host-b", b)):
                await eventually(
                    partial(_acked_all, stack, host_id, _keys(received)),
                    f"what {host_id} got acknowledged",
                    timeout_s=SLOW_WAIT_S,
                    poll_s=SLOW_POLL_S,
                )


async def _owes(stack: BridgeFleet, host_id: str, key: tuple[str, str]) -> bool:
    record = await stack.ledger.host_record(host_id)
    return record is not None and record.entry(key) is not None


async def _unheld(stack: BridgeFleet, host_id: str) -> bool:
    record = await stack.ledger.host_record(host_id)
    return record is not None and record.held_by is not None and not record.held_by.active


async def _acked(stack: BridgeFleet, host_id: str, key: tuple[str, str]) -> bool:
    return await _acked_all(stack, host_id, [key])


async def _acked_all(stack: BridgeFleet, host_id: str, keys: list[tuple[str, str]]) -> bool:
    record = await stack.ledger.host_record(host_id)
    return record is not None and record.pending == () and set(keys) <= set(record.acked)

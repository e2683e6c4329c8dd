"""The acknowledgement reaction's parts: which reaction types the settings take, the keeper handing over
exactly what its own acknowledgement write took out of a record (so across replicas, and across a write
whose answer was lost, a message is reacted to at most once), and the reaction queue's outcomes.

Records on a LocalBackend (two keepers on one folder are two replicas); Graph is a fake that records calls.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from service.config import SettingsError, load_settings
from service.delivery.ack_reactions import AckReactions, ReactionOutcome
from service.delivery.claim_lookup import ClaimLookup
from service.delivery.host_keeper import HostKeeper
from service.delivery.host_record import (
    PendingDelivery,
    empty_record,
    settled_intents,
    with_intents,
)
from service.delivery.host_records import HostRecords
from service.delivery.hub import DeliveryHub
from service.domain.message import InboundMessage, Source
from service.domain.reaction_type import check_reaction_type
from service.graph.errors import GraphError, GraphForbidden, GraphServerError, GraphThrottled
from service.storage.backend import MemoryBackend
from service.storage.faults import Fault, FaultRule, FaultyBackend
from service.storage.local import LocalBackend
from service.telemetry.metrics import DeliveryMetrics, LedgerMetrics, Metrics

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=timezone.utc)
CHAT = "19:c1"


class FakeGraph:
    """Records each setReaction; raises the errors it is given, one per call, first."""

    def __init__(self, *errors: GraphError) -> None:
        self.errors = list(errors)
        self.reacted: list[tuple[str, str, str]] = []

    async def set_chat_message_reaction(
        self, chat_id: str, message_id: str, reaction_type: str
    ) -> None:
        if self.errors:
            raise self.errors.pop(0)
        self.reacted.append((chat_id, message_id, reaction_type))


def inbound(mid: str, source: Source = Source.CHAT) -> InboundMessage:
    return InboundMessage(
        source, CHAT if source is Source.CHAT else "email", mid, "u1", "Ada", T0, f"body {mid}"
    )


def entries(*messages: InboundMessage) -> list[PendingDelivery]:
    """Owed entries, as an acknowledgement takes them out of a record."""
    return list(
        settled_intents(
            with_intents(empty_record("h1"), "c1", list(messages), T0), {"c1"}, set()
        ).pending
    )


def counted(metrics: Metrics, outcome: ReactionOutcome) -> float:
    return (
        metrics.registry.get_sample_value(
            "entrabot_ack_reactions_total", {"outcome": outcome.value}
        )
        or 0.0
    )


# --- the setting ---


@pytest.mark.parametrize("value", ["👀", "✅", "👍🏽", "❤️", "1️⃣", "like", "heart"])
def test_an_emoji_or_one_of_graphs_names_is_a_reaction_type(value: str) -> None:
    assert check_reaction_type(value) == value


@pytest.mark.parametrize("value", ["eyes", "Like", "custom", "👀 ok", "ok", "1"])
def test_text_is_not_a_reaction_type(value: str) -> None:
    with pytest.raises(ValueError):
        check_reaction_type(value)


def test_the_setting_is_off_unless_set_and_a_bad_value_is_named_at_start_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ENTRABOT_DELIVERY_ACK_REACTION", raising=False)
    assert load_settings().delivery_ack_reaction is None
    monkeypatch.setenv("ENTRABOT_DELIVERY_ACK_REACTION", " ")
    assert load_settings().delivery_ack_reaction is None
    monkeypatch.setenv("ENTRABOT_DELIVERY_ACK_REACTION", " ✅ ")
    assert load_settings().delivery_ack_reaction == "✅"
    monkeypatch.setenv("ENTRABOT_DELIVERY_ACK_REACTION", "eyes")
    with pytest.raises(
        SettingsError, match=r"^ENTRABOT_DELIVERY_ACK_REACTION: .*one emoji .*leave it empty"
    ):
        load_settings()


# --- the keeper hands over what its own write took out ---


def _keeper(backend: MemoryBackend, replica: str, taken: list[tuple[str, str]]) -> HostKeeper:
    return HostKeeper(
        HostRecords(backend, LedgerMetrics()),
        ClaimLookup(backend),
        DeliveryHub(DeliveryMetrics()),
        replica,
        metrics=DeliveryMetrics(),
        clock=lambda: T0,
        acknowledged_here=lambda got: taken.extend(e.key for e in got),
    )


async def _acknowledge(keeper: HostKeeper, keys: list[tuple[str, str]]) -> None:
    await keeper.acknowledge("h1", keys)
    await keeper.background.settle()  # the batched acknowledgement writes


async def _owe(backend: MemoryBackend, *messages: InboundMessage) -> None:
    await HostRecords(backend, LedgerMetrics()).update(
        "h1",
        lambda r: settled_intents(
            with_intents(r, "claim-1", list(messages), T0), {"claim-1"}, set()
        ),
    )


async def test_only_the_write_that_takes_a_message_out_of_the_record_hands_it_over(
    tmp_path: Path,
) -> None:
    backend = LocalBackend(tmp_path)
    await _owe(backend, inbound("1"), inbound("2"))
    first_taken: list[tuple[str, str]] = []
    second_taken: list[tuple[str, str]] = []
    first, second = _keeper(backend, "r1", first_taken), _keeper(backend, "r2", second_taken)
    await second.records.read("h1")  # the second replica's cache still shows both owed

    await _acknowledge(first, [(CHAT, "1")])
    await _acknowledge(
        second, [(CHAT, "1"), (CHAT, "2")]
    )  # a conflict, a read, and only "2" is still owed
    await _acknowledge(first, [(CHAT, "1")])  # a repeated acknowledgement
    await _acknowledge(second, [(CHAT, "2")])

    assert first_taken == [(CHAT, "1")] and second_taken == [(CHAT, "2")]
    assert (await HostRecords(backend, LedgerMetrics()).read("h1")).pending == ()
    # and each message counts as delivered once across the fleet, by the replica whose write took it out
    for keeper in (first, second):
        assert keeper.metrics is not None
        assert keeper.metrics.deliveries.labels("push", "chat", "delivered")._value.get() == 1
        assert keeper.status()["acknowledged"] == 1


async def test_an_acknowledgement_whose_answer_was_lost_hands_over_nothing(tmp_path: Path) -> None:
    """The write landed but its answer was lost: the retry reads the record, finds nothing owed, and so
    nothing is reacted to — a missed courtesy, never a second reaction."""
    faulty = FaultyBackend(LocalBackend(tmp_path))
    await _owe(faulty, inbound("1"))
    taken: list[tuple[str, str]] = []
    keeper = _keeper(faulty, "r1", taken)
    faulty.add(FaultRule(Fault.WRITE_RESPONSE_LOST, key="deliveries/*", times=1))
    await _acknowledge(keeper, [(CHAT, "1")])
    assert faulty.injected[Fault.WRITE_RESPONSE_LOST] == 1
    assert (await HostRecords(faulty, LedgerMetrics()).read("h1")).pending == ()
    assert taken == []


# --- the queue ---


async def test_a_chat_message_is_reacted_to_once_and_mail_never() -> None:
    graph, metrics = FakeGraph(), Metrics()
    reactions = AckReactions(graph, "👀", metrics=metrics.delivery)
    reactions.offer(entries(inbound("1"), inbound("m1", Source.EMAIL)))
    await reactions.cycle()
    assert graph.reacted == [(CHAT, "1", "👀")]
    assert counted(metrics, ReactionOutcome.SET) == 1 and reactions.queued == 0


async def test_a_reaction_graph_does_not_take_is_counted_and_never_sent_again() -> None:
    graph, metrics = (
        FakeGraph(
            GraphThrottled("later", retry_after=None),
            GraphServerError("5xx", status=503),
            GraphForbidden("no", status=403),
        ),
        Metrics(),
    )
    reactions = AckReactions(graph, "✅", metrics=metrics.delivery)
    reactions.offer(entries(inbound("1"), inbound("2"), inbound("3"), inbound("4")))
    await reactions.cycle()
    assert graph.reacted == [(CHAT, "4", "✅")]
    assert [
        counted(metrics, o)
        for o in (
            ReactionOutcome.THROTTLED,
            ReactionOutcome.UNKNOWN,
            ReactionOutcome.FAILED,
            ReactionOutcome.SET,
        )
    ] == [1, 1, 1, 1]
    await reactions.cycle()
    assert len(graph.reacted) == 1


async def test_a_full_queue_drops_the_reaction_and_never_waits() -> None:
    graph, metrics = FakeGraph(), Metrics()
    reactions = AckReactions(graph, "👀", metrics=metrics.delivery, capacity=1)
    reactions.offer(entries(inbound("1"), inbound("2")))
    assert reactions.queued == 1 and counted(metrics, ReactionOutcome.DROPPED) == 1
    await reactions.cycle()
    assert graph.reacted == [(CHAT, "1", "👀")]

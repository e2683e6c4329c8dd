from datetime import datetime, timedelta, timezone

from service.delivery.hub import DeliveryHub, DispatchOutcome, Handover, TargetKind
from service.domain.message import InboundMessage, Source
from service.telemetry.metrics import DeliveryMetrics

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)


def msg(mid: str, *, chat="c1", minutes=0, sponsor=False, source=Source.CHAT) -> InboundMessage:
    return InboundMessage(
        source,
        chat,
        mid,
        "u1",
        "User",
        T0 + timedelta(minutes=minutes),
        "hi",
        sender_is_sponsor=sponsor,
    )


class FakeTarget:
    def __init__(self, tid, kind=TargetKind.PUSH, *, alive=True, fail=False, only_sponsors=False):
        self.target_id, self.kind = tid, kind
        self.alive, self.fail, self.only_sponsors = alive, fail, only_sponsors
        self.got: list[str] = []
        self.allotments: list[tuple[list[str], list[str]]] = []

    def is_alive(self):
        return self.alive

    def accepts(self, m):
        return m.sender_is_sponsor if self.only_sponsors else True

    def room_for(self, m, alongside):
        return (
            not alongside and not self.got
        )  # one message per hand-over, as a permission request takes

    def allotted(self, taken, left):
        self.allotments.append(([x.message_id for x in taken], [x.message_id for x in left]))

    async def deliver(self, m):
        if self.fail:
            self.alive = False
            return Handover.NOT_TAKEN
        self.got.append(m.message_id)
        return Handover.TAKEN


def test_an_empty_hub_claims_nothing():
    hub = DeliveryHub(DeliveryMetrics())
    assert not hub.can_take(Source.CHAT) and not hub.can_take(Source.EMAIL)
    assert hub.claimable([msg("1")]) == []


def test_a_sponsor_wait_makes_only_sponsor_chat_messages_claimable():
    hub = DeliveryHub(DeliveryMetrics())
    hub.register(FakeTarget("w", TargetKind.SPONSOR_WAIT, only_sponsors=True))
    assert hub.can_take(Source.CHAT) and not hub.can_take(Source.EMAIL)
    assert [m.message_id for m in hub.claimable([msg("1"), msg("2", sponsor=True)])] == ["2"]


def test_a_sponsor_wait_is_offered_only_the_oldest_sponsor_message_of_a_batch():
    hub = DeliveryHub(DeliveryMetrics())
    hub.register(FakeTarget("w", TargetKind.SPONSOR_WAIT, only_sponsors=True))
    batch = [
        msg("3", chat="c2", minutes=3, sponsor=True),
        msg("1", minutes=1),
        msg("2", minutes=2, sponsor=True),
    ]
    assert [m.message_id for m in hub.claimable(batch)] == ["2"]


def test_two_waits_take_two_and_a_push_target_takes_the_rest():
    waits_only = DeliveryHub(DeliveryMetrics())
    for name in ("w1", "w2"):
        waits_only.register(FakeTarget(name, TargetKind.SPONSOR_WAIT, only_sponsors=True))
    batch = [msg(str(i), minutes=i, sponsor=True) for i in range(4)]
    assert [m.message_id for m in waits_only.claimable(batch)] == ["0", "1"]
    waits_only.register(FakeTarget("p"))
    assert [m.message_id for m in waits_only.claimable(batch)] == ["0", "1", "2", "3"]


def test_each_bounded_target_is_told_what_it_was_allotted_and_what_it_had_no_room_for():
    hub = DeliveryHub(DeliveryMetrics())
    wait, push = (
        FakeTarget("w", TargetKind.SPONSOR_WAIT, only_sponsors=True),
        FakeTarget("p", alive=False),
    )
    hub.register(wait)
    hub.register(push)
    batch = [
        msg("2", minutes=2, sponsor=True),
        msg("1", minutes=1, sponsor=True),
        msg("3", minutes=3),
    ]
    assert [m.message_id for m in hub.claimable(batch)] == ["1"]
    assert wait.allotments == [(["1"], ["2"])]
    push.alive = True
    assert [m.message_id for m in hub.claimable(batch)] == [
        "1",
        "2",
        "3",
    ]  # a push host takes them all
    assert wait.allotments == [(["1"], ["2"])]  # nothing allotted to the wait then


async def test_an_allotted_message_goes_to_the_wait_it_was_allotted_to():
    hub = DeliveryHub(DeliveryMetrics())
    first, second = (
        FakeTarget(name, TargetKind.SPONSOR_WAIT, only_sponsors=True) for name in ("w1", "w2")
    )
    hub.register(first)
    hub.register(second)
    batch = [msg("1", minutes=1, sponsor=True), msg("2", minutes=2, sponsor=True)]
    assert [m.message_id for m in hub.claimable(batch)] == ["1", "2"]
    await hub.dispatch([batch[1]])  # the second wait's claim lands first
    await hub.dispatch([batch[0]])
    assert (first.got, second.got) == (["1"], ["2"])


async def test_a_bounded_target_without_room_leaves_an_unallotted_message_to_the_push_host():
    hub = DeliveryHub(DeliveryMetrics())
    wait, push = FakeTarget("w", TargetKind.SPONSOR_WAIT, only_sponsors=True), FakeTarget("p")
    hub.register(wait)
    hub.register(push)
    await hub.dispatch([msg("1", sponsor=True), msg("2", minutes=1, sponsor=True)])
    assert wait.got == ["1"] and push.got == ["2"]


async def test_a_message_the_hub_handed_over_is_not_claimable_again():
    hub = DeliveryHub(DeliveryMetrics())
    wait = FakeTarget("w", TargetKind.SPONSOR_WAIT, only_sponsors=True)
    hub.register(wait)
    handed, new = msg("1", sponsor=True), msg("2", minutes=1, sponsor=True)
    await hub.dispatch([handed])
    hub.unregister("w")
    hub.register(FakeTarget("w2", TargetKind.SPONSOR_WAIT, only_sponsors=True))
    # Read again (its chat's watermark stopped before it): it must not take the new wait's place.
    assert [m.message_id for m in hub.claimable([handed, new])] == ["2"]
    assert not hub.needs_allotment([handed])


async def test_two_chats_messages_of_the_same_millisecond_are_two_messages():
    hub = DeliveryHub(DeliveryMetrics())
    push = FakeTarget("p")
    hub.register(push)
    await hub.dispatch([msg("1796227065652", chat="c1")])
    # Teams ids are creation milliseconds, unique only within a chat.
    assert [m.chat_id for m in hub.claimable([msg("1796227065652", chat="c2")])] == ["c2"]


def test_only_messages_a_wait_alone_would_take_need_the_cycles_joint_allotment():
    hub = DeliveryHub(DeliveryMetrics())
    hub.register(FakeTarget("w", TargetKind.SPONSOR_WAIT, only_sponsors=True))
    assert hub.needs_allotment([msg("1"), msg("2", sponsor=True)])
    assert not hub.needs_allotment([msg("1")])  # nobody here takes it: it is simply not claimable
    hub.register(FakeTarget("p"))
    assert not hub.needs_allotment([msg("2", sponsor=True)])  # a push host takes any number


def test_dead_targets_do_not_count():
    hub = DeliveryHub(DeliveryMetrics())
    hub.register(FakeTarget("p", alive=False))
    assert hub.claimable([msg("1")]) == []


async def test_dispatch_is_oldest_first_and_each_message_goes_to_one_target():
    hub = DeliveryHub(DeliveryMetrics())
    a, b = FakeTarget("a"), FakeTarget("b")
    hub.register(a)
    hub.register(b)
    results = await hub.dispatch([msg("3", minutes=3), msg("1", minutes=1), msg("2", minutes=2)])
    assert [r.message_id for r in results] == ["1", "2", "3"]
    assert sorted(a.got + b.got) == ["1", "2", "3"]
    # one chat sticks to the target that took its first message
    assert a.got == ["1", "2", "3"] or b.got == ["1", "2", "3"]


async def test_a_target_that_dies_mid_dispatch_hands_over_to_the_next():
    metrics = DeliveryMetrics()
    hub = DeliveryHub(metrics=metrics)
    dying, spare = FakeTarget("dying", fail=True), FakeTarget("spare")
    hub.register(dying)
    hub._sticky["c1"] = "dying"
    hub.register(spare)
    [result] = await hub.dispatch([msg("1")])
    assert result.outcome is DispatchOutcome.DELIVERED and result.target_id == "spare"
    assert metrics.deliveries.labels("push", "chat", "failed")._value.get() == 1


async def test_a_claimed_message_with_no_live_target_is_reported_not_retried_forever():
    hub = DeliveryHub(DeliveryMetrics())
    hub.register(FakeTarget("only", fail=True))
    [result] = await hub.dispatch([msg("1")])
    assert result.outcome is DispatchOutcome.NO_TARGET


async def test_a_pending_sponsor_wait_takes_the_sponsor_reply_before_a_push_session():
    hub = DeliveryHub(DeliveryMetrics())
    push, wait = FakeTarget("p"), FakeTarget("w", TargetKind.SPONSOR_WAIT, only_sponsors=True)
    hub.register(push)
    hub.register(wait)
    await hub.dispatch([msg("1", sponsor=True), msg("2", minutes=1)])
    assert wait.got == ["1"] and push.got == ["2"]


def test_a_closed_hub_claims_nothing():
    hub = DeliveryHub(DeliveryMetrics())
    hub.register(FakeTarget("p"))
    hub.close()
    assert not hub.can_take(Source.CHAT) and hub.claimable([msg("1")]) == []


async def test_each_dispatch_carries_the_message_it_handed_over_or_could_not() -> None:
    hub = DeliveryHub(DeliveryMetrics())
    mail = msg("m1", chat="email", source=Source.EMAIL)
    [nobody] = await hub.dispatch([mail])
    assert nobody.outcome is DispatchOutcome.NO_TARGET and nobody.message is mail
    hub.register(FakeTarget("a"))
    chat = msg("c1")
    [handed] = await hub.dispatch([chat])
    assert handed.outcome is DispatchOutcome.DELIVERED and handed.message is chat


def test_one_source_keeps_the_words_stored_records_and_envelopes_already_use() -> None:
    assert [(s.value, s.envelope_word, s.subscription_name) for s in Source] == [
        ("chat", "teams", "chat"),
        ("channel", "teams", "channel"),
        ("email", "email", "mail"),
    ]
    assert Source.from_subscription_name("mail") is Source.EMAIL
    assert Source.from_subscription_name("meeting") is None  # a kind from a newer version

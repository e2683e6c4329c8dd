"""SponsorGate: sponsors recognised by object id, or by address within our tenant, across watched chats;
never by name."""

from __future__ import annotations

from dataclasses import dataclass

from service.domain.sponsors import Sponsor, SponsorGate
from service.graph.models import ChatMember

ALICE = Sponsor(
    "11111111-aaaa-0000-0000-000000000001",
    "alice@contoso.example",
    "alice@contoso.example",
    "Alice Sponsor",
)
ALICE_GUEST_OID = "99999999-bbbb-0000-0000-000000000009"
MALLORY_OID = "66666666-cccc-0000-0000-000000000006"
OUR_TENANT = "aaaaaaaa-0000-0000-0000-00000000000a"
OTHER_TENANT = "bbbbbbbb-0000-0000-0000-00000000000b"


@dataclass(frozen=True)
class Member:
    user_id: str | None
    email: str | None = None
    display_name: str | None = None
    tenant_id: str | None = OUR_TENANT


def gate(*members_by_chat: tuple[str, list[Member]]) -> SponsorGate:
    g = SponsorGate([ALICE], tenant_id=OUR_TENANT)
    for chat_id, members in members_by_chat:
        g.refresh_chat(chat_id, members)
    return g


def test_a_directory_sponsor_id_is_a_sponsor_in_any_chat() -> None:
    g = gate()
    assert g.is_sponsor(ALICE.object_id, "chat-a") and g.is_sponsor(ALICE.object_id)


def test_object_ids_compare_ignoring_case() -> None:
    assert gate().is_sponsor(ALICE.object_id.upper(), "chat-a")


def test_a_sponsors_other_account_is_learned_from_a_chats_members_by_email() -> None:
    g = gate(("chat-b", [Member(ALICE_GUEST_OID, "Alice@Contoso.Example", "Alice (Guest)")]))
    assert g.is_sponsor(ALICE_GUEST_OID, "chat-b")
    assert g.is_sponsor(ALICE_GUEST_OID)  # no chat given: any watched chat's evidence counts


def test_a_sponsor_account_learned_in_one_chat_does_not_count_in_another_chat() -> None:
    g = gate(("chat-b", [Member(ALICE_GUEST_OID, "alice@contoso.example")]))
    assert not g.is_sponsor(ALICE_GUEST_OID, "chat-c")


def test_a_member_matching_the_sponsors_upn_is_learned() -> None:
    sponsor = Sponsor(
        "22222222-aaaa-0000-0000-000000000002",
        user_principal_name="dana@contoso.example",
        mail=None,
    )
    g = SponsorGate([sponsor], tenant_id=OUR_TENANT)
    g.refresh_chat("chat-a", [Member(ALICE_GUEST_OID, "DANA@contoso.example")])
    assert g.is_sponsor(ALICE_GUEST_OID, "chat-a")


def test_a_guest_sponsors_ext_upn_matches_their_home_address() -> None:
    sponsor = Sponsor(
        "33333333-aaaa-0000-0000-000000000003", "erin_fabrikam.example#EXT#@contoso.onmicrosoft.com"
    )
    g = SponsorGate([sponsor], tenant_id=OUR_TENANT)
    g.refresh_chat("chat-a", [Member(ALICE_GUEST_OID, "erin@fabrikam.example")])
    assert g.is_sponsor(ALICE_GUEST_OID, "chat-a")


def test_a_display_name_alone_never_makes_a_sponsor() -> None:
    g = gate(("chat-a", [Member(MALLORY_OID, "mallory@evil.example", "Alice Sponsor")]))
    assert not g.is_sponsor(MALLORY_OID, "chat-a") and not g.is_sponsor(MALLORY_OID)


def test_a_look_alike_address_does_not_match() -> None:
    # "ａlice" (fullwidth) and the Kelvin sign "K" would equal the real address under Unicode folding
    sponsor = Sponsor("44444444-aaaa-0000-0000-000000000004", mail="kate@contoso.example")
    g = SponsorGate([sponsor], tenant_id=OUR_TENANT)
    g.refresh_chat(
        "chat-a",
        [Member(MALLORY_OID, "\u212aate@contoso.example"), Member("m2", "ａlice@contoso.example")],
    )
    g.refresh_chat("chat-b", [Member("m3", "\u0430lice@contoso.example")])  # Cyrillic a
    assert not any(g.is_sponsor(oid) for oid in (MALLORY_OID, "m2", "m3"))


def test_members_who_left_stop_counting_when_the_chat_is_refreshed() -> None:
    g = gate(("chat-b", [Member(ALICE_GUEST_OID, "alice@contoso.example")]))
    g.refresh_chat("chat-b", [Member(MALLORY_OID, "mallory@evil.example")])
    assert not g.is_sponsor(ALICE_GUEST_OID, "chat-b")


def test_a_forgotten_chat_teaches_nothing_any_more() -> None:
    g = gate(("chat-b", [Member(ALICE_GUEST_OID, "alice@contoso.example")]))
    g.forget_chat("chat-b")
    assert not g.is_sponsor(ALICE_GUEST_OID)


def test_replacing_the_sponsors_recomputes_what_chats_taught() -> None:
    g = gate(("chat-b", [Member(ALICE_GUEST_OID, "alice@contoso.example")]))
    g.replace_sponsors(
        [Sponsor("55555555-aaaa-0000-0000-000000000005", mail="frank@contoso.example")]
    )
    assert not g.is_sponsor(ALICE_GUEST_OID, "chat-b") and not g.is_sponsor(ALICE.object_id)
    g.replace_sponsors([ALICE])
    assert g.is_sponsor(ALICE_GUEST_OID, "chat-b")


def test_a_member_without_an_object_id_teaches_nothing() -> None:
    g = gate(("chat-b", [Member(None, "alice@contoso.example")]))
    assert not g.is_sponsor(None) and not g.is_sponsor("", "chat-b")


def test_graph_chat_members_feed_the_gate_directly() -> None:
    member = ChatMember.model_validate(
        {
            "id": "membership-id",
            "userId": ALICE_GUEST_OID,
            "displayName": "Alice",
            "email": "alice@contoso.example",
            "tenantId": OUR_TENANT,
        }
    )
    g = SponsorGate([ALICE], tenant_id=OUR_TENANT)
    g.refresh_chat("chat-b", [member])
    assert g.is_sponsor(ALICE_GUEST_OID, "chat-b") and not g.is_sponsor("membership-id", "chat-b")


def test_a_member_of_another_tenant_never_matches_by_address() -> None:
    # Teams external access: another tenant sets whatever mail it likes on its own users.
    g = gate(("chat-b", [Member(MALLORY_OID, "alice@contoso.example", tenant_id=OTHER_TENANT)]))
    assert not g.is_sponsor(MALLORY_OID, "chat-b") and not g.is_sponsor(MALLORY_OID)


def test_a_member_without_a_tenant_never_matches_by_address() -> None:
    g = gate(("chat-b", [Member(MALLORY_OID, "alice@contoso.example", tenant_id=None)]))
    assert not g.is_sponsor(MALLORY_OID, "chat-b")


def test_without_the_agents_tenant_no_member_matches_by_address() -> None:
    g = SponsorGate([ALICE], tenant_id=None)
    g.refresh_chat("chat-b", [Member(ALICE_GUEST_OID, "alice@contoso.example", tenant_id=None)])
    assert not g.is_sponsor(ALICE_GUEST_OID, "chat-b") and g.is_sponsor(ALICE.object_id, "chat-b")


def test_tenant_ids_compare_ignoring_case() -> None:
    g = gate(
        ("chat-b", [Member(ALICE_GUEST_OID, "alice@contoso.example", tenant_id=OUR_TENANT.upper())])
    )
    assert g.is_sponsor(ALICE_GUEST_OID, "chat-b")


def test_a_sponsor_id_counts_whatever_tenant_its_membership_shows() -> None:
    g = gate(
        ("chat-b", [Member(ALICE.object_id, "someone@fabrikam.example", tenant_id=OTHER_TENANT)])
    )
    assert g.is_sponsor(ALICE.object_id, "chat-b")


def test_only_a_sponsors_own_object_id_is_a_directory_sponsor() -> None:
    g = gate(("chat-b", [Member(ALICE_GUEST_OID, "alice@contoso.example")]))
    assert g.is_sponsor(ALICE_GUEST_OID, "chat-b") and not g.is_directory_sponsor(ALICE_GUEST_OID)
    assert g.is_directory_sponsor(ALICE.object_id.upper())
    assert not g.is_directory_sponsor(None) and not g.is_directory_sponsor("")

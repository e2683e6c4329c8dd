"""Which polled chat messages and mails are for the agent, and HTML bodies as plain text."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from service.domain.filters import (
    MailNoise,
    filter_human_messages,
    html_to_text,
    is_noise_mail,
    mail_noise,
)
from service.graph.models import ChatMessage

AGENT_UPN = "agent@contoso.example"
AGENT_OID = "aaaaaaaa-0000-0000-0000-000000000001"
HUMAN_OID = "bbbbbbbb-0000-0000-0000-000000000002"


@dataclass(frozen=True)
class Sender:
    id: str
    kind: str = "user"
    display_name: str | None = None
    user_principal_name: str | None = None


@dataclass(frozen=True)
class Msg:
    id: str
    sender: Sender | None
    message_type: str = "message"


def human(mid: str, **kw: str) -> Msg:
    return Msg(mid, Sender(HUMAN_OID, **kw))


def kept_ids(
    messages: list[Msg],
    *,
    sent: frozenset[str] = frozenset(),
    upn: str | None = AGENT_UPN,
    oid: str | None = AGENT_OID,
) -> list[str]:
    return [
        m.id
        for m in filter_human_messages(
            messages, agent_upn=upn, agent_object_id=oid, sent_message_ids=sent
        )
    ]


def test_agent_messages_are_dropped_by_upn_ignoring_case() -> None:
    own = Msg("1", Sender("some-other-id", user_principal_name="AGENT@Contoso.Example"))
    assert kept_ids([own, human("2")]) == ["2"]


def test_agent_messages_are_dropped_by_object_id_when_the_sender_has_no_upn() -> None:
    assert kept_ids([Msg("1", Sender(AGENT_OID.upper())), human("2")], upn=None) == ["2"]


def test_a_human_named_like_the_agent_is_kept() -> None:
    spoof = Msg(
        "1", Sender(HUMAN_OID, display_name="Agent", user_principal_name="agent.fake@evil.example")
    )
    assert kept_ids([spoof]) == ["1"]


@pytest.mark.parametrize(
    "message_type", ["chatEvent", "systemEventMessage", "typing", "unknownFutureValue"]
)
def test_system_messages_are_dropped(message_type: str) -> None:
    assert kept_ids([Msg("1", Sender(HUMAN_OID), message_type), human("2")]) == ["2"]


def test_messages_without_a_user_sender_are_dropped() -> None:
    assert kept_ids(
        [Msg("1", None), Msg("2", Sender("app-id", kind="application")), human("3")]
    ) == ["3"]


def test_ids_this_replica_sent_are_dropped_even_when_graph_names_a_human() -> None:
    # delegated mode: Graph attributes the agent's post to the signed-in human
    assert kept_ids([human("1"), human("2")], sent=frozenset({"1"})) == ["2"]


def test_the_entrabot_prefix_alone_does_not_drop_a_message() -> None:
    assert kept_ids([human("1", display_name="[EntraBot] Alice")]) == ["1"]


def test_order_is_kept() -> None:
    assert kept_ids([human("3"), human("1"), human("2")]) == ["3", "1", "2"]


def test_filtering_without_any_agent_identity_is_refused() -> None:
    with pytest.raises(ValueError, match="UPN or object id"):
        kept_ids([human("1")], upn=None, oid=None)


def test_graph_chat_messages_are_filtered_directly() -> None:
    def graph(mid: str, sender: dict | None, kind: str = "message") -> ChatMessage:
        return ChatMessage.model_validate(
            {
                "id": mid,
                "messageType": kind,
                "createdDateTime": "2026-11-29T12:00:00Z",
                "from": sender,
                "body": {"contentType": "html", "content": "<p>hi</p>"},
            }
        )

    messages = [
        graph("1", {"user": {"id": AGENT_OID, "displayName": "Agent"}}),
        graph("2", {"user": {"id": HUMAN_OID, "displayName": "Agent"}}),
        graph("3", None, "systemEventMessage"),
        graph("4", {"application": {"id": "bot", "displayName": "Bot"}}),
    ]
    kept = filter_human_messages(
        messages, agent_upn=AGENT_UPN, agent_object_id=AGENT_OID, sent_message_ids=set()
    )
    assert [m.id for m in kept] == ["2"]


# --- mail ---


@pytest.mark.parametrize(
    "address",
    [
        "noreply@contoso.example",
        "no-reply@contoso.example",
        "No_Reply+bounce@contoso.example",
        "donotreply@contoso.example",
        "do-not-reply@contoso.example",
        "microsoft-noreply@microsoft.com",
        "MAILER-DAEMON@contoso.example",
        "postmaster@contoso.example",
    ],
)
def test_no_reply_and_bounce_senders_are_noise(address: str) -> None:
    assert mail_noise(address, "Hello") is MailNoise.NO_REPLY_SENDER


@pytest.mark.parametrize(
    "address",
    [
        "notifications@teams.mail.microsoft",
        "x@email.teams.microsoft.com",
        "msonlineservicesteam@microsoftonline.com",
    ],
)
def test_teams_and_microsoft_notification_senders_are_noise(address: str) -> None:
    assert mail_noise(address, "Hello") is MailNoise.MICROSOFT_NOTIFICATION


@pytest.mark.parametrize(
    "subject",
    [
        "You have been added to a team in Microsoft Teams",
        "You've been added to Project X",
        "You have missed Teams messages",
        "Alice is trying to reach you in Microsoft Teams",
    ],
)
def test_teams_notification_subjects_from_microsoft_are_noise(subject: str) -> None:
    assert (
        mail_noise("office365@service.microsoft.com", subject) is MailNoise.MICROSOFT_NOTIFICATION
    )


def test_a_person_writing_a_notification_like_subject_is_not_noise() -> None:
    assert not is_noise_mail("carol@contoso.example", "You have been added to the launch team")
    assert not is_noise_mail("carol@contoso.example", "missed messages from yesterday")


def test_a_person_whose_address_merely_contains_reply_is_not_noise() -> None:
    assert not is_noise_mail("replyguy@contoso.example", "Hi")
    assert not is_noise_mail("noreplyfan@contoso.example", "Hi")


def test_the_agents_own_mail_is_noise_under_any_of_its_addresses() -> None:
    own = {"agent@contoso.example", "entrabot@contoso.example"}
    assert (
        mail_noise("EntraBot@Contoso.Example", "Re: hi", agent_addresses=own) is MailNoise.OWN_MAIL
    )


def test_mail_without_a_sender_address_is_noise() -> None:
    assert mail_noise(None, "hi") is mail_noise("  ", "hi") is MailNoise.NO_SENDER


@pytest.mark.parametrize(
    "headers",
    [
        {"Auto-Submitted": "auto-replied"},
        {"auto-submitted": "auto-generated"},
        {"Precedence": "bulk"},
        {"X-Autoreply": "yes"},
        {"List-Unsubscribe": "<mailto:leave@lists.example>"},
        {"Auto-Submitted": "no, auto-generated"},
    ],
)
def test_auto_replies_and_bulk_mail_are_noise_by_their_headers(headers: dict[str, str]) -> None:
    assert mail_noise("carol@contoso.example", "Out of office", headers) is MailNoise.AUTOMATED


def test_auto_submitted_no_is_a_person() -> None:
    assert not is_noise_mail("carol@contoso.example", "Hi", {"Auto-Submitted": "no"})


# --- HTML bodies ---


def test_html_to_text_drops_scripts_styles_and_comments() -> None:
    markup = "<html><head><style>p{}</style><title>t</title></head><body><script>alert(1)</script><!-- hidden -->Hi</body></html>"
    assert html_to_text(markup) == "Hi"


def test_html_to_text_turns_blocks_into_lines_and_decodes_entities() -> None:
    markup = "<div>Hello&nbsp;<b>team</b>,</div><p>a &lt; b &amp; c</p><ul><li>one</li><li>two</li></ul>line<br>break"
    assert html_to_text(markup) == "Hello team,\n\na < b & c\n\none\ntwo\nline\nbreak"


def test_html_to_text_keeps_teams_mentions_and_emoji() -> None:
    markup = '<p><at id="0">Alice</at> thanks <emoji id="smile" alt="🙂" title="Smile"></emoji></p>'
    assert html_to_text(markup) == "Alice thanks 🙂"


def test_html_to_text_skips_an_unclosed_script_to_the_end() -> None:
    assert html_to_text("visible<script>steal()") == "visible"

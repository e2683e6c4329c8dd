"""SponsorGate: whether a chat message comes from one of the agent identity's sponsors.

The sponsors come from Graph (``servicePrincipals/{id}/sponsors``); the caller fetches them and the
members of each watched chat, and feeds both in. A sponsor may post from another account in some chat
(a B2B guest of our tenant under the same address), so the gate learns, per chat, which member accounts
are a sponsor's: a member whose object id is a sponsor's, or a member of the agent's own tenant whose mail
address equals a sponsor's mail or UPN. A display name is never enough: anyone can take anyone's; and an
address is enough only inside our tenant: another tenant sets its users' mail as it likes, and its users
share chats with ours through Teams external access.

An account matched by address is a sponsor's for messages (delivered bare, answering a sponsor wait), but
only a sponsor's own directory account (``is_directory_sponsor``) may decide a permission request.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from service.domain.identity import normalise_identifier

_GUEST_UPN_MARK = "#ext#"


@dataclass(frozen=True, slots=True)
class Sponsor:
    object_id: str
    user_principal_name: str | None = None
    mail: str | None = None
    display_name: str | None = None  # for people reading logs and prompts; never matched on


class ChatMemberView(Protocol):
    """What the gate reads of a chat member (``service.graph.models.ChatMember`` fits)."""

    @property
    def user_id(self) -> str | None: ...  # the member's object id (``id`` is the membership's)

    @property
    def email(self) -> str | None: ...

    @property
    def tenant_id(self) -> str | None: ...  # the tenant the member's account belongs to


def _address_keys(address: str | None) -> set[str]:
    """The comparable forms of an address or UPN.

    A B2B guest's UPN encodes the address it was invited under — ``alice_contoso.com#EXT#@tenant…`` is
    alice@contoso.com — and the tenant minted it from that invitation, so it stands for that address.
    A domain has no "_", so the last one in the prefix separates the local part from the domain.
    """
    normal = normalise_identifier(address)
    if normal is None:
        return set()
    keys = {normal}
    encoded, mark, _ = normal.partition(_GUEST_UPN_MARK)
    if mark and "_" in encoded:
        local, _, domain = encoded.rpartition("_")
        if local and "." in domain:
            keys.add(f"{local}@{domain}")
    return keys


@dataclass(frozen=True, slots=True)
class _Member:
    object_id: str
    address_keys: frozenset[str]


class SponsorGate:
    """Sponsor ids from the directory, plus the member accounts each watched chat showed to be theirs.

    Pure state, no I/O: ``refresh_chat`` when a chat is added (and when its members are re-read),
    ``forget_chat`` when it stops being watched, ``replace_sponsors`` when the sponsor list is re-read.
    A list given with ``expires_at`` counts until then (on ``monotonic``) and not after, whether or not
    anyone replaces it: a refresh loop that stopped cannot leave a removed sponsor counting.
    """

    def __init__(
        self,
        sponsors: Iterable[Sponsor],
        *,
        tenant_id: str | None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``tenant_id``: the agent's own tenant id, the GUID Graph shows as a member's tenantId (a tenant's
        domain name never equals it); without it no member ever matches by address."""
        self._tenant_id = normalise_identifier(tenant_id)
        self.monotonic = monotonic
        self._members: dict[str, tuple[_Member, ...]] = {}
        self._aliases: dict[str, frozenset[str]] = {}
        self.replace_sponsors(sponsors)

    @property
    def sponsor_ids(self) -> frozenset[str]:
        return frozenset() if self._expired() else self._sponsor_ids

    @property
    def sponsors(self) -> tuple[Sponsor, ...]:
        """The sponsors as read (with their names, for showing); none once the list has expired."""
        return () if self._expired() else self._sponsors

    def _expired(self) -> bool:
        return self._expires_at is not None and self.monotonic() >= self._expires_at

    def holds_read_list(self) -> bool:
        """Whether a list given with an expiry still stands (a read list younger than its bound)."""
        return self._expires_at is not None and not self._expired()

    def replace_sponsors(
        self, sponsors: Iterable[Sponsor], *, expires_at: float | None = None
    ) -> None:
        self._expires_at = expires_at
        sponsors = self._sponsors = tuple(sponsors)
        self._sponsor_ids = frozenset(
            oid for s in sponsors if (oid := normalise_identifier(s.object_id)) is not None
        )
        self._sponsor_addresses = frozenset(
            key
            for s in sponsors
            for a in (s.user_principal_name, s.mail)
            for key in _address_keys(a)
        )
        self._aliases = {chat_id: self._sponsor_members(m) for chat_id, m in self._members.items()}

    def refresh_chat(self, chat_id: str, members: Iterable[ChatMemberView]) -> None:
        """Learn (again) which members of ``chat_id`` are sponsors; members who left stop counting."""
        known = tuple(
            _Member(oid, frozenset(_address_keys(m.email)) if self._is_ours(m) else frozenset())
            for m in members
            if (oid := normalise_identifier(m.user_id)) is not None
        )
        self._members[chat_id] = known
        self._aliases[chat_id] = self._sponsor_members(known)

    def _is_ours(self, member: ChatMemberView) -> bool:
        """Whether the member's account belongs to the agent's tenant, so its mail is our tenant's to vouch for.

        Graph gives a chat member the tenant the user belongs to (v1.0, "aadUserConversationMember resource
        type": tenantId, "TenantId which the Microsoft Entra user belongs to"); a B2B guest's account is in
        our tenant, an external-access user's is in theirs. A member without one is not assumed ours.
        """
        tenant = normalise_identifier(member.tenant_id)
        return self._tenant_id is not None and tenant == self._tenant_id

    def forget_chat(self, chat_id: str) -> None:
        self._members.pop(chat_id, None)
        self._aliases.pop(chat_id, None)

    def _sponsor_members(self, members: tuple[_Member, ...]) -> frozenset[str]:
        return frozenset(
            m.object_id
            for m in members
            if m.object_id in self._sponsor_ids or m.address_keys & self._sponsor_addresses
        )

    def is_sponsor(self, sender_id: str | None, chat_id: str | None = None) -> bool:
        """Whether ``sender_id`` (a message's sender object id) is a sponsor.

        With ``chat_id``, an account learned as a sponsor's counts only in the chat that showed it; a
        directory sponsor id counts everywhere. Without it, any watched chat's evidence counts.
        """
        sender = normalise_identifier(sender_id)
        if sender is None or self._expired():
            return False
        if sender in self._sponsor_ids:
            return True
        if chat_id is not None:
            return sender in self._aliases.get(chat_id, frozenset())
        return any(sender in aliases for aliases in self._aliases.values())

    def is_directory_sponsor(self, sender_id: str | None) -> bool:
        """Whether ``sender_id`` is a sponsor's own object id (the directory's), never an account matched by
        address: only this may decide a permission request, the most dangerous imperative a message carries."""
        sender = normalise_identifier(sender_id)
        return sender is not None and sender in self.sponsor_ids

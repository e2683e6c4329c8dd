"""The tenant an emulator serves, as a validated, immutable model loaded from JSON (or built in code).

A seed names every directory object (users, apps, the agent identity and its sponsors), the chats and
mail the tenant starts with, the token lifetime and the throttling budget. Cross-references are
checked on load, so a typo in a seed fails there and not as a puzzling 403 later.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from emulator.drive_policy import DriveLimits
from emulator.subscription_policy import SubscriptionPolicy
from emulator.team_seed import SeedTeam, TeamsThrottleBudget, team_seed_problems

SEEDS_DIR = Path(__file__).resolve().parent / "seeds"
TOKEN_EXCHANGE_AUDIENCE = "api://AzureADTokenExchange"

# What the tenant admin consented for the agent identity (and public clients) by default.
DEFAULT_DELEGATED_SCOPES = (
    "Chat.Create",
    "Chat.ReadWrite",
    "ChatMessage.Send",
    "ChatMember.Read",
    "Mail.ReadWrite",
    "Mail.Send",
    "Mail.Read.Shared",
    # Files: the agent's own OneDrive, and the files people share with it (another's file needs .All).
    "Files.ReadWrite.All",
    "User.Read",
    "User.ReadBasic.All",
    # Teams and channels (emulator.team_state): the least privileged delegated permission of List
    # joinedTeams / Get team, List channels, List channel messages, and Send chatMessage in a channel.
    "Team.ReadBasic.All",
    "Channel.ReadBasic.All",
    "ChannelMessage.Read.All",
    "ChannelMessage.Send",
)

# The application permission "List agentIdentity sponsors" documents (its only one; delegated: not
# supported), granted to the agent identity so it can read its own sponsors app-only.
SPONSOR_READ_ROLES = ("AgentIdentity.ReadWrite.All",)

SeedTime = str | datetime  # ISO-8601 instant, or relative to start-up: "-7d", "-2h", "-30m", "-90s"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ThrottleBudget(_Model):
    """Graph's documented limits, each enforced per app per tenant unless its name says otherwise.

    Figures from Microsoft's "Microsoft Graph service-specific throttling limits" page (Microsoft Teams
    service limits; Outlook service limits) and SPEC §9. A limit set to None is not enforced; ``enabled``
    false turns them all off (unit-ish tests that are not about limits). The default is Graph's: the
    demo seed and the benchmarks run with it so that no figure is kinder than Graph would be.
    """

    enabled: bool = True
    # Teams: "GET 1:1/group chat message 20 rps" and "POST 1:1/group chat message 20 rps" (two rows).
    chat_messages_per_s: int | None = Field(default=20, ge=1)  # reads of chat messages
    chat_message_sends_per_s: int | None = Field(default=20, ge=1)
    # Reads of any one chat's messages (SPEC §9: "any one chat 1 req/s").
    per_chat_per_s: int | None = Field(default=1, ge=1)
    # List chats and get chat, per app per user (SPEC §9: "list or get chat 5 req/s per user").
    chats_per_user_per_s: int | None = Field(default=5, ge=1)
    # Teams: "Other GET API calls for Microsoft Teams 30 rps" (and 30 rps for other calls); directory
    # reads share this budget too, which is stricter than Entra's and so never flatters us.
    other_per_s: int | None = Field(default=30, ge=1)
    # Outlook, per app ID and mailbox: "10,000 API requests in a 10 minute period". The 4 concurrent
    # requests are counted per app and mailbox as SPEC §9 has it; the current Outlook section counts
    # them per app ID across mailboxes, which is the same thing for a service reading one mailbox.
    mail_per_10_min: int | None = Field(default=10_000, ge=1)
    mail_concurrent: int | None = Field(default=4, ge=1)
    # Teams' team, channel and channel-message limits (emulator.team_seed).
    teams: TeamsThrottleBudget = TeamsThrottleBudget()

    @classmethod
    def relaxed(cls) -> ThrottleBudget:
        """No limit at all: for tests about something else."""
        return cls(enabled=False)


class SeedUser(_Model):
    id: str
    user_principal_name: str
    display_name: str
    mail: str | None = None
    password: str | None = None  # humans only; agent users cannot sign in with a password
    given_name: str | None = None
    surname: str | None = None
    job_title: str | None = None
    # Set on the agent user: the agent identity that alone may impersonate it (Graph: identityParentId).
    agent_identity_id: str | None = None
    # A user of another tenant who reaches this tenant's chats through Teams external access (federation):
    # their own tenant's id, which chat members show as tenantId. None for this tenant's users, B2B guests
    # included (a guest account lives in this tenant). Their mail is whatever their tenant set.
    home_tenant_id: str | None = None
    # A shared mailbox (Exchange: a mailbox whose account cannot sign in, which people are granted access
    # to): it has mail and an address, and is none of the tenant's people.
    shared_mailbox: bool = False
    # Who may read this mailbox besides its owner (user ids or UPNs): Exchange's FullAccess or Read
    # permission on its folders. A delegated token needs Mail.Read.Shared as well ("Get Outlook messages in
    # a shared or delegated folder", read, not run: no tenant).
    mailbox_readers: tuple[str, ...] = ()

    @property
    def address(self) -> str:
        return self.mail or self.user_principal_name

    @property
    def is_agent_user(self) -> bool:
        return self.agent_identity_id is not None


class FederatedCredential(_Model):
    """A trust on an app: tokens from ``issuer`` for ``subject`` with one of ``audiences`` authenticate it."""

    name: str
    issuer: str
    subject: str
    audiences: tuple[str, ...] = (TOKEN_EXCHANGE_AUDIENCE,)


class FederationIssuer(_Model):
    """An external token issuer (e.g. an AKS OIDC issuer) and its public signing keys."""

    issuer: str
    jwks: dict[str, Any]


class SeedApp(_Model):
    app_id: str
    display_name: str
    kind: Literal["blueprint", "public_client", "confidential_client"]
    client_secrets: tuple[str, ...] = ()
    certificates: tuple[str, ...] = ()  # PEM certificates (public part only)
    federated_credentials: tuple[FederatedCredential, ...] = ()
    delegated_scopes: tuple[str, ...] = DEFAULT_DELEGATED_SCOPES
    app_roles: tuple[str, ...] = ()  # application permissions for app-only Graph tokens

    @property
    def is_confidential(self) -> bool:
        return self.kind != "public_client"


class AgentIdentity(_Model):
    """An agent identity: a child of one blueprint, with no credentials of its own.

    Its ``id`` is used both as the client id (token requests) and the service principal id (Graph).
    """

    id: str
    display_name: str
    blueprint_app_id: str
    sponsors: tuple[str, ...] = ()  # user ids
    # Sponsors that are not users (Graph allows groups): listed with the users, never a user to /users/{id}.
    group_sponsors: tuple[str, ...] = ()
    delegated_scopes: tuple[str, ...] = DEFAULT_DELEGATED_SCOPES
    app_roles: tuple[str, ...] = ()


class SeedMessage(_Model):
    from_user: str | None = None  # user id or UPN; None for a system message
    content: str = ""
    content_type: Literal["text", "html"] = "text"
    created: SeedTime | None = None
    message_type: Literal["message", "systemEventMessage", "chatEvent"] = "message"


class SeedChat(_Model):
    id: str | None = None  # generated when absent
    chat_type: Literal["oneOnOne", "group"] = "group"
    topic: str | None = None
    members: tuple[str, ...]  # user ids or UPNs
    created: SeedTime | None = None
    messages: tuple[SeedMessage, ...] = ()


class SeedMail(_Model):
    to: str  # user id, UPN or mail
    from_address: str
    from_name: str | None = None
    subject: str = ""
    body: str = ""
    content_type: Literal["text", "html"] = "text"
    received: SeedTime | None = None
    # internetMessageHeaders, name -> value: e.g. {"Auto-Submitted": "auto-generated"} for a robot's mail.
    headers: dict[str, str] = {}


class Seed(_Model):
    tenant_id: str
    tenant_domain: str = "contoso.onmicrosoft.com"
    token_lifetime_s: int = Field(3600, ge=1)
    # The device authorization grant: how long a code may wait for the person (Entra: 900 s) and how
    # often the client may poll (Entra answers 5 s; a test's seed may say 1).
    device_code_lifetime_s: int = Field(900, ge=1)
    device_code_interval_s: int = Field(5, ge=1)
    # Entra's default refresh-token lifetime outside single-page apps: 90 days.
    refresh_token_lifetime_s: int = Field(90 * 24 * 3600, ge=1)
    throttle: ThrottleBudget = ThrottleBudget()
    # GET /me/chats?$orderby=lastMessagePreview/createdDateTime desc: documented, but some tenants
    # answer it with 400 (the single-host system saw that); "refused" plays such a tenant.
    chats_orderby: Literal["supported", "refused"] = "supported"
    # "List agentIdentity sponsors" takes an app-only token with AgentIdentity.ReadWrite.All only (delegated:
    # not supported). True restores the emulator's old, kinder answer to delegated tokens.
    sponsors_delegated: bool = False
    # How "List agentIdentity sponsors" names each sponsor. "typed" (the default): {"@odata.type", "id",
    # "deletedDateTime"}, as its v1.0 page shows each directoryObject (with the sponsor's own type here:
    # Microsoft's Graph SDK reads "#microsoft.graph.user" as a User); "id_only": {"id"} alone, the shape
    # Microsoft's own entrabot code reports ("returns only id regardless of $select").
    sponsors_shape: Literal["id_only", "typed"] = "typed"
    random_seed: int | None = None  # makes fault injection reproducible
    subscriptions: SubscriptionPolicy = SubscriptionPolicy()  # change-notification rules
    drives: DriveLimits = DriveLimits()  # OneDrive upload and download limits (drive_policy)
    users: tuple[SeedUser, ...]
    apps: tuple[SeedApp, ...]
    agent_identities: tuple[AgentIdentity, ...] = ()
    federation_issuers: tuple[FederationIssuer, ...] = ()
    chats: tuple[SeedChat, ...] = ()
    mail: tuple[SeedMail, ...] = ()
    teams: tuple[SeedTeam, ...] = ()  # teams, channels and channel messages (emulator.team_seed)

    _refs: dict[str, SeedUser] = PrivateAttr(default_factory=dict)

    # --- lookups ---

    def find_user(self, ref: str) -> SeedUser | None:
        """A user by object id, UPN or mail (the last two case-insensitively)."""
        return self._refs.get(ref) or self._refs.get(ref.lower())

    def find_app(self, app_id: str) -> SeedApp | None:
        return next((a for a in self.apps if a.app_id == app_id), None)

    def find_agent_identity(self, identity_id: str) -> AgentIdentity | None:
        return next((a for a in self.agent_identities if a.id == identity_id), None)

    @property
    def agent_identity(self) -> AgentIdentity:
        if not self.agent_identities:
            raise LookupError("this seed has no agent identity; add one under agent_identities")
        return self.agent_identities[0]

    @property
    def agent_user(self) -> SeedUser:
        identity = self.agent_identity
        user = next((u for u in self.users if u.agent_identity_id == identity.id), None)
        if user is None:
            raise LookupError(
                f"no user is the agent user of agent identity {identity.id}; set agent_identity_id "
                "on one user"
            )
        return user

    @property
    def blueprint(self) -> SeedApp:
        app = self.find_app(self.agent_identity.blueprint_app_id)
        assert app is not None  # checked on load
        return app

    @property
    def public_client(self) -> SeedApp:
        app = next((a for a in self.apps if a.kind == "public_client"), None)
        if app is None:
            raise LookupError(
                "this seed has no public client app; add one with kind 'public_client'"
            )
        return app

    @property
    def humans(self) -> tuple[SeedUser, ...]:
        return tuple(u for u in self.users if not u.is_agent_user and not u.shared_mailbox)

    def may_read_mailbox(self, reader_id: str, owner: SeedUser) -> bool:
        """Whether user ``reader_id`` holds a permission on ``owner``'s mailbox (its own, or granted)."""
        return reader_id == owner.id or any(
            (u := self.find_user(ref)) is not None and u.id == reader_id
            for ref in owner.mailbox_readers
        )

    @property
    def sponsors(self) -> tuple[SeedUser, ...]:
        return tuple(self.find_user(s) for s in self.agent_identity.sponsors)  # type: ignore[misc]

    def with_sponsor(self, identity_id: str, user_ref: str) -> Seed:
        """This tenant with user ``user_ref`` (id or UPN) a sponsor of the agent identity (LookupError: no such one)."""
        identity, user = self.find_agent_identity(identity_id), self.find_user(user_ref)
        if identity is None or user is None:
            raise LookupError(
                f"no agent identity {identity_id!r} or no user {user_ref!r} in this tenant"
            )
        if user.id in identity.sponsors:
            return self
        return self._with_identity(
            identity.model_copy(update={"sponsors": identity.sponsors + (user.id,)})
        )

    def _with_identity(self, edited: AgentIdentity) -> Seed:
        return self.model_copy(
            update={
                "agent_identities": tuple(
                    edited if a.id == edited.id else a for a in self.agent_identities
                )
            }
        )

    def without_sponsor(self, identity_id: str, sponsor_id: str) -> Seed:
        """This tenant with ``sponsor_id`` no longer a sponsor of the agent identity (LookupError: it was not one)."""
        identity = self.find_agent_identity(identity_id)
        if identity is None or sponsor_id not in identity.sponsors + identity.group_sponsors:
            raise LookupError(f"{sponsor_id!r} is not a sponsor of agent identity {identity_id!r}")
        return self._with_identity(
            identity.model_copy(
                update={
                    "sponsors": tuple(s for s in identity.sponsors if s != sponsor_id),
                    "group_sponsors": tuple(s for s in identity.group_sponsors if s != sponsor_id),
                }
            )
        )

    def model_post_init(self, __context: Any) -> None:
        # Built once so lookups stay O(1) for 1,000-chat seeds.
        for u in self.users:
            self._refs[u.id] = u
            self._refs[u.user_principal_name.lower()] = u
        # A mail address is not unique (an external user's tenant may set any): it never shadows an id or
        # UPN, and the first user with it keeps it.
        for u in self.users:
            self._refs.setdefault(u.address.lower(), u)

    @model_validator(mode="after")
    def _check_references(self) -> Seed:
        problems: list[str] = []
        _unique("user id", [u.id for u in self.users], problems)
        _unique(
            "user principal name", [u.user_principal_name.lower() for u in self.users], problems
        )
        _unique("app id", [a.app_id for a in self.apps], problems)
        _unique("agent identity id", [a.id for a in self.agent_identities], problems)
        _unique("chat id", [c.id for c in self.chats if c.id], problems)
        issuers = {i.issuer for i in self.federation_issuers}
        for app in self.apps:
            for fic in app.federated_credentials:
                if fic.issuer not in issuers:
                    problems.append(
                        f"app {app.app_id} trusts issuer {fic.issuer!r} but federation_issuers has no keys for it"
                    )
        for identity in self.agent_identities:
            parent = self.find_app(identity.blueprint_app_id)
            if parent is None or parent.kind != "blueprint":
                problems.append(
                    f"agent identity {identity.id}: blueprint_app_id {identity.blueprint_app_id!r}"
                    " is not an app of kind 'blueprint'"
                )
            for sponsor in identity.sponsors:
                if self.find_user(sponsor) is None:
                    problems.append(
                        f"agent identity {identity.id}: sponsor {sponsor!r} is not a user"
                    )
            for group in identity.group_sponsors:
                if self.find_user(group) is not None:
                    problems.append(
                        f"agent identity {identity.id}: group sponsor {group!r} is a user; list it "
                        "under sponsors"
                    )
        for user in self.users:
            if user.agent_identity_id and self.find_agent_identity(user.agent_identity_id) is None:
                problems.append(
                    f"user {user.id}: agent_identity_id {user.agent_identity_id!r} "
                    "is not an agent identity"
                )
            if user.agent_identity_id and user.password:
                problems.append(f"user {user.id} is an agent user and cannot have a password")
            if user.home_tenant_id == self.tenant_id:
                problems.append(
                    f"user {user.id}: home_tenant_id is this tenant; leave it unset for its users"
                )
            if user.shared_mailbox and (user.password or user.agent_identity_id):
                problems.append(
                    f"user {user.id} is a shared mailbox: it has no password and is no agent user"
                )
            for reader in user.mailbox_readers:
                if self.find_user(reader) is None:
                    problems.append(f"user {user.id}: mailbox reader {reader!r} is not a user")
        for n, chat in enumerate(self.chats):
            label = chat.id or f"chats[{n}]"
            for member in chat.members:
                if self.find_user(member) is None:
                    problems.append(f"chat {label}: member {member!r} is not a user")
            if chat.chat_type == "oneOnOne" and len(set(chat.members)) != 2:
                problems.append(f"chat {label}: a oneOnOne chat has exactly two members")
            member_ids = {u.id for m in chat.members if (u := self.find_user(m)) is not None}
            for message in chat.messages:
                sender = self.find_user(message.from_user) if message.from_user else None
                if message.from_user and (sender is None or sender.id not in member_ids):
                    problems.append(
                        f"chat {label}: message sender {message.from_user!r} is not a member"
                    )
                if message.from_user is None and message.message_type == "message":
                    problems.append(f"chat {label}: a message of type 'message' needs from_user")
        for mail in self.mail:
            if self.find_user(mail.to) is None:
                problems.append(f"mail to {mail.to!r}: not a user of this tenant")
        problems.extend(team_seed_problems(self))
        if problems:
            raise ValueError("seed is inconsistent:\n  - " + "\n  - ".join(problems))
        return self


def _unique(what: str, values: list[str], problems: list[str]) -> None:
    seen: set[str] = set()
    for v in values:
        if v in seen:
            problems.append(f"duplicate {what} {v!r}")
        seen.add(v)


def load_seed(source: Seed | Path | str | dict[str, Any]) -> Seed:
    """A Seed from a model, a JSON file path, or a dict (as parsed from JSON)."""
    if isinstance(source, Seed):
        return source
    if isinstance(source, dict):
        return Seed.model_validate(source)
    path = Path(source)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(
            f"seed file {path} does not exist; pass a JSON seed, or demo_seed_path()"
        ) from None
    return Seed.model_validate(data)


def demo_seed_path() -> Path:
    """The shipped demo tenant (emulator/seeds/demo.json)."""
    return SEEDS_DIR / "demo.json"


# --- seeds built in code (tests, benchmarks) ---

_NAMESPACE = uuid.UUID("6f1c9d3e-64a4-4b53-9a53-3c1d7d0a8b10")
_NAMES = [
    ("Ada", "Lovelace"),
    ("Grace", "Hopper"),
    ("Alan", "Turing"),
    ("Katherine", "Johnson"),
    ("Edsger", "Dijkstra"),
    ("Barbara", "Liskov"),
    ("Donald", "Knuth"),
    ("Frances", "Allen"),
]


def stable_id(*parts: object) -> str:
    """A deterministic GUID, so seeds built twice with the same arguments name the same objects."""
    return str(uuid.uuid5(_NAMESPACE, "/".join(str(p) for p in parts)))


def build_seed(
    *,
    chats: int = 2,
    humans: int = 3,
    history: int = 0,
    token_lifetime_s: int = 3600,
    throttle: ThrottleBudget | None = None,
    tenant_id: str | None = None,
    domain: str = "contoso.onmicrosoft.com",
    blueprint_secret: str = "blueprint-dev-secret",
    password: str = "Passw0rd!",
    random_seed: int | None = 1,
    shared_mailboxes: bool = False,
) -> Seed:
    """A tenant with ``humans`` people (the first, Ada, sponsors the agent), the agent user, its blueprint,
    a public client, and ``chats`` chats the agent user is in: chat 0 is a oneOnOne with Ada, the others
    group chats of the agent, Ada and one more person. Each chat gets ``history`` messages a minute apart,
    the newest one minute old. Ids are stable for the same arguments. ``shared_mailboxes`` adds two shared
    mailboxes: support@, which the agent user may read, and finance@, which only Ada may.
    """
    if humans < 2:
        raise ValueError(
            "build_seed needs at least 2 humans: group chats have 3 members including the agent"
        )
    tenant = tenant_id or stable_id("tenant", domain)
    people = []
    for i in range(humans):
        given, surname = _NAMES[i] if i < len(_NAMES) else ("User", str(i))
        login = given.lower() if i < len(_NAMES) else f"user{i}"
        people.append(
            SeedUser(
                id=stable_id(tenant, "user", i),
                user_principal_name=f"{login}@{domain}",
                display_name=f"{given} {surname}",
                given_name=given,
                surname=surname,
                password=password,
            )
        )
    blueprint_id = stable_id(tenant, "blueprint")
    identity_id = stable_id(tenant, "agent-identity")
    agent = SeedUser(
        id=stable_id(tenant, "agent-user"),
        user_principal_name=f"entrabot@{domain}",
        display_name="Entrabot",
        given_name="Entrabot",
        agent_identity_id=identity_id,
    )
    seed_chats = []
    for c in range(chats):
        other = people[1 + (c - 1) % (humans - 1)]
        members = (agent.id, people[0].id) if c == 0 else (agent.id, people[0].id, other.id)
        messages = tuple(
            SeedMessage(
                from_user=members[1 + k % (len(members) - 1)],
                content=f"chat {c} message {k}",
                created=f"-{history - k}m",
            )
            for k in range(history)
        )
        seed_chats.append(
            SeedChat(
                id=_chat_id(tenant, c, members),
                chat_type="oneOnOne" if c == 0 else "group",
                topic=None if c == 0 else f"Chat {c}",
                members=members,
                created="-1d",
                messages=messages,
            )
        )
    shared = (
        (
            SeedUser(
                id=stable_id(tenant, "shared", "support"),
                user_principal_name=f"support@{domain}",
                display_name="Support",
                shared_mailbox=True,
                mailbox_readers=(agent.id,),
            ),
            SeedUser(
                id=stable_id(tenant, "shared", "finance"),
                user_principal_name=f"finance@{domain}",
                display_name="Finance",
                shared_mailbox=True,
                mailbox_readers=(people[0].id,),
            ),
        )
        if shared_mailboxes
        else ()
    )
    return Seed(
        tenant_id=tenant,
        tenant_domain=domain,
        token_lifetime_s=token_lifetime_s,
        throttle=throttle or ThrottleBudget(),
        random_seed=random_seed,
        users=(*people, agent, *shared),
        apps=(
            SeedApp(
                app_id=blueprint_id,
                display_name="Entrabot Blueprint",
                kind="blueprint",
                client_secrets=(blueprint_secret,),
            ),
            SeedApp(
                app_id=stable_id(tenant, "public-client"),
                display_name="Entrabot Dev CLI",
                kind="public_client",
            ),
        ),
        agent_identities=(
            AgentIdentity(
                id=identity_id,
                display_name="Entrabot",
                blueprint_app_id=blueprint_id,
                sponsors=(people[0].id,),
                app_roles=SPONSOR_READ_ROLES,
            ),
        ),
        chats=tuple(seed_chats),
    )


def one_on_one_chat_id(user_a: str, user_b: str) -> str:
    """Teams' id for the oneOnOne chat of two users; the same whichever of them asks."""
    first, second = sorted((user_a, user_b))
    return f"19:{first}_{second}@unq.gbl.spaces"


def group_chat_id(*parts: object) -> str:
    return (
        "19:" + hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:32] + "@thread.v2"
    )


def _chat_id(tenant: str, index: int, members: tuple[str, ...]) -> str:
    if len(members) == 2:
        return one_on_one_chat_id(*members)
    return group_chat_id(tenant, "chat", index)

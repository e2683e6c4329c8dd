"""The delivery half, the workers and the tool dependencies of one replica, wired from the parts
they run on.

The replica and the test harnesses both call ``wire_delivery`` and ``wire_workers``: a new part is
wired here once, and the tests run the same graph with LocalBackend, the emulator and a fake clock
instead of a copy of the replica's start-up body (so every worker test claims with the intent a
``--push`` bridge's host gets, as the replica does).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta

from service.background import Background
from service.config import Settings
from service.delivery.ack_reactions import AckReactions
from service.delivery.claim_lookup import ClaimLookup
from service.delivery.fault_points import FaultPoints
from service.delivery.host_keeper import HostKeeper
from service.delivery.host_records import HostRecords
from service.delivery.inbox import Inbox, InboxTiming
from service.from_settings.tools import tool_options
from service.delivery.claim_intents import ClaimIntents
from service.delivery.hub import DeliveryHub
from service.delivery.mail_send import MailSender
from service.tools.channel_send import ChannelSender
from service.tools.chat_send import ChatSender
from service.delivery.shared_sponsors import FleetSponsors
from service.delivery.sponsor_refresh import SponsorRefresher
from service.domain.conversation import TEAMS_CHATS
from service.domain.sponsors import Sponsor, SponsorGate
from service.graph.client import GraphClient
from service.ledger.claims.chat_ledger import ChatLedger
from service.ledger.claims.email_claims import EmailClaimer
from service.ledger.memory.interactions import InteractionLog
from service.ledger.memory.promises import PromiseLedger
from service.ledger.memory.watched_chats import WatchedChats
from service.ledger.summary.production import DailySummaryProducer
from service.clock import Clock, utc_now
from service.ledger.memory.chat_members import ChatMembers
from service.ledger.claims.corrupt_cursors import CorruptCursors
from service.ledger.fleet.hints import HintFeed, HintLog, HintReader
from service.ledger.fleet.leases import Lease
from service.ledger.memory.permission_requests import PermissionRequests
from service.ledger.fleet.readers import ReaderRoster
from service.ledger.memory.sent_messages import SentMessages
from service.storage.backend import MemoryBackend
from service.telemetry.metrics import Metrics
from service.tools.deps import NewChatLoops, Outbox, ToolDeps
from service.domain.agent import AgentUser
from service.workers import chat_scan, chat_sweep
from service.workers.chat_book import ChatBook
from service.workers.chat_poll import ChatPoller
from service.workers.chat_scan import ChatScanner, ScanCadence
from service.workers.chat_state import OfferedMessage
from service.workers import channel_watch
from service.workers.channel_polls import ChannelOptions, channel_poll
from service.workers.conversation_polls import PollShared, conversation_poll
from service.workers.conversation_reader import ChatMessagesReader
from service.workers.chat_sweep import ChatSweep
from service.workers.discovery import ROLE as DISCOVERY_ROLE, Discovery
from service.workers.first_watch import FirstWatch
from service.ledger.fleet.poll_turns import PollTurn
from service.workers.email_poll import EmailPoller
from service.workers.read_turns import ReadTurns
from service.workers.recorder import DeliveryRecorder
from service.workers.summary_mail import SponsorSummaryMail


@dataclass(frozen=True)
class DeliveryHalf:
    """Everything between a won claim and a host's acknowledgement, built once per replica: the hub
    (the live targets here), the hosts' records and the intents written into them before a claim, the
    keeper that pushes what each host is owed, the reactions to what was acknowledged (when an operator
    set ENTRABOT_DELIVERY_ACK_REACTION), and the background work they start."""

    hub: DeliveryHub
    records: HostRecords
    intents: ClaimIntents
    keeper: HostKeeper
    inbox: Inbox
    reactions: AckReactions | None
    background: Background


def wire_delivery(
    settings: Settings,
    backend: MemoryBackend,
    *,
    replica_id: str,
    metrics: Metrics,
    graph: GraphClient | None = None,
    faults: FaultPoints | None = None,
    clock: Clock = utc_now,
) -> DeliveryHalf:
    """Build the delivery half (no I/O). ``graph`` sets the acknowledgement reactions (none without
    it); ``faults``: the test-only crash points the replica reads from its environment."""
    background = Background()
    hub = DeliveryHub(metrics=metrics.delivery, background=background)
    records = HostRecords(backend, metrics=metrics.ledger)
    intents = ClaimIntents(hub, records, faults or FaultPoints(), clock=clock)
    # Off by default: a reaction is visible to everyone in the chat, so an operator chooses it.
    reactions = (
        AckReactions(graph.messages, settings.delivery_ack_reaction, metrics=metrics.delivery)
        if settings.delivery_ack_reaction and graph is not None
        else None
    )
    keeper = HostKeeper(
        records,
        ClaimLookup(backend),
        hub,
        replica_id,
        in_flight=intents.in_flight,
        metrics=metrics.delivery,
        background=background,
        clock=clock,
        redeliver_after_s=settings.delivery_redeliver_after_s,
        acknowledged_here=reactions.offer if reactions is not None else None,
        refresh_s=settings.delivery_refresh_s,
    )
    inbox = Inbox(
        records,
        ClaimLookup(backend),
        hub,
        replica_id,
        metrics=metrics.delivery,
        in_flight=intents.in_flight,
        acknowledged_here=reactions.offer if reactions is not None else None,
        clock=clock,
        timing=InboxTiming(
            retention_s=settings.inbox_retention_s, max_wait_s=settings.inbox_max_wait_s
        ),
    )
    return DeliveryHalf(hub, records, intents, keeper, inbox, reactions, background)


@dataclass(frozen=True)
class Workers:
    """The wired objects: the loops' cycles, the ledgers they share, and what the tools are given."""

    watched: WatchedChats
    interactions: InteractionLog
    promises: PromiseLedger
    sent: SentMessages
    permissions: PermissionRequests | None  # None in delegated mode: no permission relay
    chat_poller: ChatPoller
    email_poller: EmailPoller
    discovery: Discovery
    summary: DailySummaryProducer
    tool_deps: ToolDeps
    # Team channels' poll (its watch is its role); None in delegated mode, where /me/joinedTeams is
    # the person's.
    channel_poller: ChatPoller | None = None


async def wire_workers(
    *,
    settings: Settings,
    backend: MemoryBackend,
    is_cloud: bool,
    graph: GraphClient,
    delivery: DeliveryHalf,
    agent: AgentUser,
    gate: SponsorGate,
    replica_id: str,
    metrics: Metrics,
    clock: Clock = utc_now,
    directory: GraphClient | None = None,
    corrupt_cursors: CorruptCursors | None = None,
    notifications_flowing: Callable[[], Awaitable[bool]] | None = None,
) -> Workers:
    """Build the workers and the tool dependencies, and load the watched chats (one store read).

    ``directory`` is the agent identity's app-only Graph client that reads the sponsors (without it no
    sponsor is recognised); ``corrupt_cursors`` makes chats stalled by a corrupt cursor visible;
    ``notifications_flowing`` tells the scanner that Graph's change notifications are live, so it relaxes.
    ``delivery`` (``wire_delivery``) takes what is claimed, and its intents write what acknowledging
    hosts are owed into their records before each claim; the tools read the inbox hosts' from it.

    Delegated mode (``agent.posts_as_person``) differs in four places: the signed-in person is the only
    sponsor (there is no agent identity to list sponsors of); ``/me/chats`` is the person's, so neither
    discovery nor the scanner and the sweep add chats to the watched list (the agent watches the chats
    it creates or writes in, and the shared list); the fleet records the agent's sent messages, which
    every chat poll reads; and there is no permission relay, since the agent's prompt and the person's
    verdict would carry one identity.
    """
    delegated = agent.posts_as_person
    hub, intents = delivery.hub, delivery.intents
    ledger_metrics, roles = metrics.ledger, metrics.roles
    interactions = InteractionLog(backend, clock=clock)
    promises = PromiseLedger(backend, clock=clock, metrics=ledger_metrics)
    watched = WatchedChats(backend, metrics=ledger_metrics, kind=TEAMS_CHATS)
    await watched.load()
    recorder = DeliveryRecorder(interactions, replica_id, clock=clock)
    sent = SentMessages(backend, replica_id, clock=clock, metrics=ledger_metrics)
    permissions = (
        None
        if delegated
        else PermissionRequests(backend, replica_id, clock=clock, metrics=ledger_metrics)
    )
    if delegated:
        gate.replace_sponsors([Sponsor(agent.object_id, agent.upn, agent.mail, agent.display_name)])
    chat_ledger = ChatLedger[OfferedMessage](
        backend, kind=TEAMS_CHATS, clock=clock, metrics=ledger_metrics, corrupt=corrupt_cursors
    )
    hint_log = HintLog(backend, clock=clock)
    # One feed for every kind's poll: a read of the hint segments serves them all.
    hint_feed = HintFeed(HintReader(backend, clock=clock))
    conversations = ChatMessagesReader(graph, gate)
    book = ChatBook()
    first_watch = FirstWatch(
        chat_ledger,
        clock,
        timedelta(hours=settings.first_sight_max_age_h),
        made_here=book.made_here,
    )

    def lease(role: str, ttl: timedelta = Lease.ttl, margin: timedelta = Lease.margin) -> Lease:
        return Lease(backend, role, replica_id, ttl=ttl, margin=margin, clock=clock, metrics=roles)

    scanner = ChatScanner(
        graph,
        lease(chat_scan.ROLE, ttl=chat_scan.LEASE_TTL, margin=chat_scan.LEASE_MARGIN),
        hint_log,
        watched,
        first_watch,
        cadence=ScanCadence(
            settings.chat_scan_interval_s,
            settings.chat_scan_active_interval_s,
            settings.chat_scan_relaxed_interval_s,
        ),
        notifications_flowing=notifications_flowing,
        clock=clock,
        metrics=metrics.changes,
        watched_only=delegated,
    )
    sweep = ChatSweep(
        graph,
        lease(chat_sweep.ROLE, ttl=chat_scan.LEASE_TTL, margin=chat_scan.LEASE_MARGIN),
        hint_log,
        chat_ledger,
        watched,
        first_watch,
        interval_s=settings.chat_sweep_interval_s,
        clock=clock,
        metrics=metrics.changes,
        watched_only=delegated,
    )
    shared = PollShared(
        hub=hub,
        intents=intents,
        recorder=recorder,
        agent=agent,
        clock=clock,
        hints=hint_feed,
        turns=ReadTurns(
            ReaderRoster(backend, replica_id, clock=clock),
            settings.chat_read_spread_s,
            settings.chat_read_gap_s,
        ),
        metrics=metrics.changes,
        first_sight_max_age=timedelta(hours=settings.first_sight_max_age_h),
        max_age=timedelta(hours=settings.chat_max_age_h),
        concurrency=settings.chat_poll_concurrency,
        sent=sent,
    )
    chat_poller = conversation_poll(
        shared,
        conversations,
        chat_ledger,
        watched,
        permissions=permissions,
        roles=(scanner, sweep),
        on_notification_hint=scanner.heard_notification,
        book=book,
    )
    channel_poller = (
        None
        if delegated
        else await channel_poll(
            shared,
            graph,
            backend,
            lease(channel_watch.ROLE),
            hint_log,
            metrics.ledger,
            ChannelOptions(
                settings.channels_delivering_all,
                settings.channel_discovery_interval_s,
                settings.channel_reads_per_s,
            ),
        )
    )
    discovery = Discovery(
        graph,
        watched,
        gate,
        lease(DISCOVERY_ROLE),
        ChatMembers(backend, metrics=ledger_metrics),
        interval=settings.discovery_interval_s,
        metrics=metrics.changes,
        first_watch=first_watch,
        sponsors=SponsorRefresher(
            gate,
            graph,
            settings.agent_identity_id,
            directory,
            interval_s=settings.sponsor_refresh_interval_s,
            stale_after_s=settings.sponsor_stale_after_s,
            metrics=metrics.changes,
            # One Graph read per interval for the whole fleet: the others take it from the record.
            shared=FleetSponsors(
                backend,
                replica_id,
                settings.agent_identity_id,
                settings.sponsor_refresh_interval_s,
                clock=clock,
            ),
        )
        if settings.agent_identity_id and not delegated
        else None,
        walks=not delegated,
    )
    email_poller = EmailPoller(
        graph,
        EmailClaimer(backend, is_cloud=is_cloud, clock=clock, metrics=ledger_metrics),
        hub,
        agent,
        recorder,
        clock=clock,
        turn=PollTurn(
            backend,
            "email_poll",
            replica_id,
            timedelta(seconds=settings.email_poll_interval_s),
            clock=clock,
        ),
        intents=intents,
    )
    mail = MailSender(graph, clock)
    # Sponsors are read only with an agent identity and its app-only client; without them nobody is mailed.
    reads_sponsors = bool(settings.agent_identity_id) and directory is not None
    summary_mail = SponsorSummaryMail(gate, mail, reads_sponsors=reads_sponsors)
    summary = DailySummaryProducer(
        backend,
        interactions,
        promises=promises,
        mailer=summary_mail,
        clock=clock,
        metrics=ledger_metrics,
    )
    tool_deps = ToolDeps(
        options=tool_options(settings),
        graph=graph,
        agent=agent,
        hub=hub,
        watched=watched,
        loops=NewChatLoops(chat_poller, discovery),
        gate=gate,
        promises=promises,
        interactions=interactions,
        summary=summary,
        replica_id=replica_id,
        clock=clock,
        sent_messages=sent,
        permissions=permissions,
        outbox=Outbox(
            mail,
            ChatSender(
                graph,
                agent.object_id,
                clock,
                record=sent if settings.auth_mode == "delegated" else None,
            ),
            ChannelSender(graph, agent.object_id, clock),
        ),
    )
    return Workers(
        watched,
        interactions,
        promises,
        sent,
        permissions,
        chat_poller,
        email_poller,
        discovery,
        summary,
        tool_deps,
        channel_poller,
    )

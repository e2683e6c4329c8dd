"""Team channels' poll on a replica: the second kind of conversation, built from the shared parts
(service.workers.conversation_polls) with the channel reader and the channel watch as its role."""

from __future__ import annotations

from dataclasses import dataclass

from service.domain.conversation import TEAM_CHANNELS
from service.graph.client import GraphClient
from service.ledger.claims.chat_ledger import ChatLedger
from service.ledger.fleet.hints import HintLog
from service.ledger.fleet.leases import Lease
from service.ledger.memory.watched_chats import WatchedChats
from service.storage.backend import MemoryBackend
from service.telemetry.metrics import LedgerMetrics
from service.workers.channel_names import ChannelNames
from service.workers.channel_reader import ChannelMessagesReader, ChannelRules
from service.workers.channel_watch import ChannelWatch, Rotation
from service.workers.chat_poll import ChatPoller
from service.workers.chat_state import OfferedMessage
from service.workers.conversation_polls import PollShared, conversation_poll


@dataclass(frozen=True)
class ChannelOptions:
    deliver_all: frozenset[str]  # Settings.channels_deliver_all: channel ids
    discover_every_s: float  # Settings.channel_discovery_interval_s
    reads_per_s: float  # Settings.channel_reads_per_s


async def channel_poll(
    shared: PollShared,
    graph: GraphClient,
    backend: MemoryBackend,
    lease: Lease,
    hint_log: HintLog,
    metrics: LedgerMetrics,
    options: ChannelOptions,
) -> ChatPoller:
    """The channel poll, its watched list loaded (one store read). It takes no permission requests:
    a channel message never decides one (every one is enveloped)."""
    watched = WatchedChats(backend, metrics=metrics, kind=TEAM_CHANNELS)
    await watched.load()
    ledger = ChatLedger[OfferedMessage](
        backend, kind=TEAM_CHANNELS, clock=shared.clock, metrics=metrics
    )
    names = ChannelNames(graph)
    reader = ChannelMessagesReader(
        graph, ChannelRules(shared.agent.object_id, options.deliver_all), names
    )
    watch = ChannelWatch(
        graph,
        lease,
        hint_log,
        watched,
        ledger,
        reader,
        names,
        shared.metrics,
        discover_every_s=options.discover_every_s,
        rotation=Rotation(options.reads_per_s),
        clock=shared.clock,
    )
    return conversation_poll(shared, reader, ledger, watched, roles=(watch,))

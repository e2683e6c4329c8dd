"""What one scripted fleet run does: the fleet it starts, the traffic the tenant sends it, the faults
it suffers, and how long the harness waits for each phase. ``FleetRun`` (``fleet_run``) runs it.

::

    plan = FleetPlan(
        fleet=FleetShape(replicas=3, hosts=2),
        traffic=TenantTraffic(chats=50, chat_messages=1000, mails=200),
        faults=Faults(disruptions=(Disruption(30.0, DisruptionKind.SIGKILL, host="host-a"),)),
    )
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Literal

from emulator.notification_faults import NotificationFaultRule
from service.devstack.fault_proxy import ProxyRule
from service.devstack.graph_outage import GraphOutage

# How often the harness looks again while it waits (for readiness, a host's replica, the drain).
POLL_STEP_S = 0.25


class DisruptionKind(str, Enum):
    SIGKILL = "sigkill"
    SIGTERM = "sigterm"
    RESTART = "restart"


@dataclass(frozen=True)
class Disruption:
    """Something done to one replica ``at_s`` seconds after traffic starts.

    The replica is the one ``host`` is connected to at that moment, the one named ``replica``, or the
    one holding the fleet role ``lease_role`` (named in ``leases/<role>.json``); a RESTART with none of
    them restarts the replica stopped most recently. Stopping a role's holder also times the takeover.
    """

    at_s: float
    kind: DisruptionKind
    host: str | None = None
    replica: str | None = None
    lease_role: str | None = None


@dataclass(frozen=True)
class FleetShape:
    """What the fleet is: its replicas and hosts, how often the replicas poll, what they talk to."""

    replicas: int = 3
    hosts: int = 2  # host i tries the replicas in turn starting with replica i
    chat_poll_s: float = 1.0
    chat_poll_jitter_s: float = 0.3
    email_poll_s: float = 3.0
    # False: replicas talk to Azurite directly (a benchmark of the bare path).
    fault_proxy: bool = True
    # Graph change notifications on: each replica's notification URL is its own loopback receiver, so
    # the subscription points at the subscription manager's replica (a new manager re-points it).
    notifications: bool = False


@dataclass(frozen=True)
class TenantTraffic:
    """The tenant and what its people send: the messages are spread evenly over ``traffic_s``."""

    chats: int = 50
    humans: int = 6
    chat_messages: int = 1000
    mails: int = 200
    traffic_s: float = 120.0
    # "refused": the tenant answers the ordered /me/chats scan with 400 (the scanner walks unordered).
    chats_orderby: Literal["supported", "refused"] = "supported"


@dataclass(frozen=True)
class Faults:
    """What the fleet suffers while the traffic runs."""

    # Switched on when traffic starts, off before the final read.
    proxy_rules: tuple[ProxyRule, ...] = ()
    disruptions: tuple[Disruption, ...] = ()
    # Every Graph read answered 503 + Retry-After for a while.
    graph_outage: GraphOutage | None = None
    # Faults on the emulator's outgoing notifications (drop, duplicate...), on while traffic runs.
    notification_faults: tuple[NotificationFaultRule, ...] = ()


@dataclass(frozen=True)
class Bounds:
    """How long the harness waits for each phase (every wait is bounded), and how it judges a loss."""

    ready_timeout_s: float = 90.0  # hosts connected and every chat bootstrapped
    # After stopping a lease role's holder: how long to watch for a successor.
    takeover_wait_s: float = 60.0
    # A claim the killed replica had not pushed yet was made at most about this long after the
    # message was sent (a poll cycle, the e-mail settle margin, and slack for a busy machine).
    in_flight_window_s: float = 15.0
    drain_quiet_s: float = 20.0  # after traffic: stop once no push arrived for this long
    drain_settled_s: float = (
        5.0  # ... or once everything arrived and nothing more did for this long
    )
    drain_max_s: float = 90.0


@dataclass(frozen=True)
class FleetPlan:
    fleet: FleetShape = field(default_factory=FleetShape)
    traffic: TenantTraffic = field(default_factory=TenantTraffic)
    faults: Faults = field(default_factory=Faults)
    bounds: Bounds = field(default_factory=Bounds)
    random_seed: int = 7  # the tenant, the traffic and the proxy's faults

    def __post_init__(self) -> None:
        if self.faults.proxy_rules and not self.fleet.fault_proxy:
            raise ValueError(
                "proxy_rules need the fault proxy; set fault_proxy=True or drop the rules"
            )
        if self.faults.notification_faults and not self.fleet.notifications:
            raise ValueError("notification_faults need notifications=True")
        if self.fleet.replicas < 1 or self.fleet.hosts < 1 or self.traffic.chats < 1:
            # Without a host no replica claims anything (the delivery rule): nothing would be delivered.
            raise ValueError("a fleet run needs at least one replica, one host and one chat")

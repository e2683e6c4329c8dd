"""Everything one emulator instance holds, built once by create_app and reached through the app."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from starlette.requests import HTTPConnection

from emulator.clock import Clock
from emulator.device_codes import DeviceAuthorizations
from emulator.faults import FaultInjector
from emulator.grants import TokenGrantor
from emulator.holds import Holds
from emulator.refresh_tokens import RefreshTokens
from emulator.seed import Seed
from emulator.state import TenantState
from emulator.stats import RequestStats
from emulator.subscription_engine import SubscriptionEngine
from emulator.throttle import Throttle
from emulator.tokens import TokenService


@dataclass
class EmulatorContext:
    seed: Seed
    clock: Clock
    state: TenantState
    tokens: TokenService
    grantor: TokenGrantor
    throttle: Throttle
    faults: FaultInjector
    stats: RequestStats
    subscriptions: SubscriptionEngine
    base_url: str | None  # fixed when known (start_emulator); else taken from each request's Host
    holds: Holds
    device_codes: DeviceAuthorizations  # pending device sign-ins, approved through the admin API
    refresh_tokens: RefreshTokens

    def base(self, request: HTTPConnection) -> str:
        return self.base_url or str(request.base_url).rstrip("/")

    def graph_base(self, request: HTTPConnection) -> str:
        return self.base(request) + "/v1.0"

    def odata_context(
        self,
        request: HTTPConnection,
        entity_set: str,
        key: str | None = None,
        navigation: str | None = None,
        *,
        entity: bool = False,
    ) -> str:
        """The ``@odata.context`` Graph puts on an answer: ``…/$metadata#chats('19%3A…')/messages`` for a
        collection, with ``/$entity`` after it for one entity (read, not run: the response examples of
        Graph's Get user, Get chat, Get chatMessage and Get message pages; the key is percent-encoded)."""
        fragment = entity_set + (f"('{quote(key, safe='')}')" if key is not None else "")
        fragment += f"/{navigation}" if navigation else ""
        return f"{self.graph_base(request)}/$metadata#{fragment}" + ("/$entity" if entity else "")

    def issuer(self, request: HTTPConnection) -> str:
        return f"{self.base(request)}/{self.seed.tenant_id}/v2.0"


def context_of(request: HTTPConnection) -> EmulatorContext:
    context: EmulatorContext = request.app.state.emulator  # set once by the app factory
    return context

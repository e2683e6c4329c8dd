"""Change-notification subscriptions (``/subscriptions``): create, renew, reauthorize, delete."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from service.graph.subscription_model import GraphSubscription
from service.graph.transport import GraphTransport
from service.graph.urls import graph_timestamp


class GraphSubscriptions:
    def __init__(self, transport: GraphTransport) -> None:
        self._t = transport

    async def create_subscription(self, body: Mapping[str, Any]) -> GraphSubscription:
        """POST /subscriptions. Not repeated after a 5xx or a lost answer (a second one could be made);
        the manager creates again on its next cycle and an orphan expires on its own."""
        url, route = self._t.urls.url("subscriptions")
        response = await self._t.request(
            "POST", url, route=route, json=dict(body), idempotent=False
        )
        return self._t.item(response, GraphSubscription, "subscription", route)

    async def renew_subscription(
        self, subscription_id: str, expiration: datetime
    ) -> GraphSubscription:
        """PATCH expirationDateTime; Graph says a renewal also reauthorizes (lifecycle notifications page)."""
        url, route = self._t.urls.url("subscriptions/{}", subscription_id)
        response = await self._t.request(
            "PATCH",
            url,
            route=route,
            json={"expirationDateTime": graph_timestamp(expiration)},
            idempotent=True,
        )
        return self._t.item(response, GraphSubscription, "subscription", route)

    async def reauthorize_subscription(self, subscription_id: str) -> None:
        url, route = self._t.urls.url("subscriptions/{}/reauthorize", subscription_id)
        await self._t.request("POST", url, route=route, idempotent=True)

    async def delete_subscription(self, subscription_id: str) -> None:
        url, route = self._t.urls.url("subscriptions/{}", subscription_id)
        await self._t.request("DELETE", url, route=route, idempotent=True)

"""Seeded humans talking to the agent through Graph itself: chat messages and mail, with their own tokens.

Used by the demo, the fleet tests and the benchmarks, so inbound traffic takes the same path a real
person's message takes (a password-grant user token, ``POST /chats/{id}/messages``, ``sendMail``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import httpx

from emulator.seed import Seed, SeedUser

GRAPH_SCOPE = "https://graph.microsoft.com/.default"


@dataclass(frozen=True, slots=True)
class Posted:
    chat_id: str
    message_id: str
    sender_id: str
    created: str


@dataclass
class HumanTraffic:
    seed: Seed
    base_url: str
    http: httpx.AsyncClient
    password: str = "Passw0rd!"
    _tokens: dict[str, str] = field(default_factory=dict)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def token(self, user: SeedUser) -> str:
        async with self._lock:
            cached = self._tokens.get(user.id)
            if cached is not None:
                return cached
            response = await self.http.post(
                f"{self.base_url}/{self.seed.tenant_id}/oauth2/v2.0/token",
                data={
                    "grant_type": "password",
                    "client_id": self.seed.public_client.app_id,
                    "username": user.user_principal_name,
                    "password": user.password or self.password,
                    "scope": GRAPH_SCOPE,
                },
            )
            response.raise_for_status()
            token: str = response.json()["access_token"]
            self._tokens[user.id] = token
            return token

    async def post_chat(self, user: SeedUser, chat_id: str, text: str) -> Posted:
        response = await self._graph(
            "POST",
            f"/chats/{chat_id}/messages",
            user,
            json={"body": {"contentType": "text", "content": text}},
        )
        body = response.json()
        return Posted(chat_id, body["id"], user.id, body["createdDateTime"])

    async def chat_ids(self, user: SeedUser) -> list[str]:
        """The chats ``user`` is a member of (the first page, as a person's client shows it)."""
        response = await self._graph("GET", "/me/chats", user)
        return [str(chat["id"]) for chat in response.json()["value"]]

    async def send_mail(self, user: SeedUser, to: str, subject: str, text: str) -> None:
        await self._graph(
            "POST",
            "/me/sendMail",
            user,
            json={
                "message": {
                    "subject": subject,
                    "body": {"contentType": "Text", "content": text},
                    "toRecipients": [{"emailAddress": {"address": to}}],
                }
            },
        )

    async def _graph(self, method: str, path: str, user: SeedUser, **kwargs) -> httpx.Response:  # type: ignore[no-untyped-def]
        for _ in range(
            20
        ):  # the app's throttling budget is shared with the fleet: honour Retry-After
            response = await self.http.request(
                method,
                f"{self.base_url}/v1.0{path}",
                headers={"Authorization": f"Bearer {await self.token(user)}"},
                **kwargs,
            )
            if response.status_code == 429:
                await asyncio.sleep(float(response.headers.get("Retry-After", "1")))
                continue
            if response.status_code == 401:
                self._tokens.pop(user.id, None)
                continue
            response.raise_for_status()
            return response
        raise RuntimeError(f"{method} {path} kept failing (throttled or unauthorized)")

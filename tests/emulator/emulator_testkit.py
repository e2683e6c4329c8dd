"""Helpers for the emulator's conformance tests: Entra's token flows walked over HTTP the way a client
walks them, and assertions on Graph's and Entra's error shapes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from emulator import RunningEmulator, Seed

SECRET = "blueprint-dev-secret"
PASSWORD = "Passw0rd!"
GRAPH_SCOPE = "https://graph.microsoft.com/.default"
EXCHANGE_SCOPE = "api://AzureADTokenExchange/.default"
SIBLING_IDENTITY = (
    "22222222-3333-4444-5555-666666666666"  # a second agent identity of the blueprint
)
JWT_BEARER = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"


@dataclass
class Entra:
    """Token requests against the emulator's token endpoint, as a client makes them."""

    emu: RunningEmulator
    http: httpx.Client

    @property
    def seed(self) -> Seed:
        return self.emu.seed

    def post(self, **form: str) -> httpx.Response:
        return self.http.post(self.emu.token_endpoint, data=form)

    def t1(self, identity_id: str | None = None, **credential: str) -> httpx.Response:
        credential = credential or {"client_secret": SECRET}
        return self.post(
            grant_type="client_credentials",
            client_id=self.seed.blueprint.app_id,
            scope=EXCHANGE_SCOPE,
            fmi_path=identity_id or self.seed.agent_identity.id,
            **credential,
        )

    def t2(
        self, t1: str, *, scope: str = EXCHANGE_SCOPE, identity_id: str | None = None
    ) -> httpx.Response:
        return self.post(
            grant_type="client_credentials",
            client_id=identity_id or self.seed.agent_identity.id,
            scope=scope,
            client_assertion_type=JWT_BEARER,
            client_assertion=t1,
        )

    def identity_app_token(self, identity_id: str | None = None) -> str:
        """The agent identity's own app-only Graph token: hop 2 asked for Graph instead of the exchange."""
        t1 = _ok(self.t1(identity_id))["access_token"]
        return _ok(self.t2(t1, scope=GRAPH_SCOPE, identity_id=identity_id))["access_token"]

    def user_token(
        self, t1: str, t2: str, *, scope: str = GRAPH_SCOPE, **who: str
    ) -> httpx.Response:
        who = who or {"user_id": self.seed.agent_user.id}
        return self.post(
            grant_type="user_fic",
            client_id=self.seed.agent_identity.id,
            scope=scope,
            client_assertion_type=JWT_BEARER,
            client_assertion=t1,
            user_federated_identity_credential=t2,
            **who,
        )

    def agent_token(self, scope: str = GRAPH_SCOPE) -> str:
        t1 = _ok(self.t1())["access_token"]
        t2 = _ok(self.t2(t1))["access_token"]
        return _ok(self.user_token(t1, t2, scope=scope))["access_token"]

    def human_token(self, upn: str, scope: str = GRAPH_SCOPE) -> str:
        return _ok(
            self.post(
                grant_type="password",
                client_id=self.seed.public_client.app_id,
                username=upn,
                password=PASSWORD,
                scope=scope,
            )
        )["access_token"]


def _ok(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    return response.json()


def bearer(token: str, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **extra}


def assert_graph_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The response is Graph's error body with this status and code; returns the error object."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and error["message"]
    inner = error["innerError"]
    assert set(inner) >= {"date", "request-id", "client-request-id"}
    assert inner["request-id"] == response.headers["request-id"]
    return error


def assert_entra_error(response: httpx.Response, status: int, error: str, code: int) -> str:
    """The response is Entra's OAuth error with this status, error and AADSTS code; returns the description."""
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"] == error, body
    assert body["error_codes"] == [code], body
    assert body["error_description"].startswith(f"AADSTS{code}: "), body
    assert {"timestamp", "trace_id", "correlation_id"} <= set(body)
    return body["error_description"]

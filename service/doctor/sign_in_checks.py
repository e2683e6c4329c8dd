"""Delegated mode's identity, checked: the settings, the sealed sign-in record, and a Graph token from it.

The token comes through the replicas' own provider (``service.signin.provider``), so a due token is
refreshed the way a replica would refresh it: under the ``signin_refresh`` lease, written back for the
fleet. The record's content is never printed: who signed in and when, its generation and refreshes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

import httpx

from service.clock import format_timestamp
from service.config import Settings
from service.doctor.identity_checks import IdentityChain
from service.doctor.report import Finding, fail, ok, skip
from service.graph.auth.tokens import GRAPH_SCOPE
from service.graph.errors import GraphError, TokenConfigurationError
from service.ledger.records.reads import ReadOutcome
from service.signin.errors import SIGN_IN_ADVICE
from service.from_settings.storage import storage_options
from service.from_settings.signin import (
    check_delegated_settings,
    delegated_token_provider,
    sign_in_store,
)
from service.signin.record import SignedInPerson
from service.signin.store import Unreadable
from service.storage.errors import StorageError
from service.storage.resolution import get_backend
from service.telemetry.metrics import Metrics, StorageMetrics

SETTINGS = "delegated settings"
RECORD = "sign-in record"
TOKEN = "signed-in token (Graph)"


@dataclass(frozen=True)
class SignInGrantee:
    """Where delegated mode's permissions go: the app registration the person signed in to, consented
    for that person (or for the tenant by an admin)."""

    client_id: str
    person: str

    def delegated(self, permission: str) -> str:
        return (
            f"add the delegated permission {permission} to the app registration {self.client_id} and consent "
            f"to it for {self.person} (or grant admin consent), then run `entrabot-fleet signin` again so the "
            "token carries it (docs/configuration.md, delegated mode)"
        )

    def application(self, permission: str) -> str:
        return f"delegated mode uses no application permission ({permission} is not needed)"


async def check_sign_in(
    settings: Settings, http: httpx.AsyncClient
) -> tuple[list[Finding], IdentityChain, SignedInPerson | None]:
    none = IdentityChain(None, None, None)
    try:
        check_delegated_settings(settings)
        backend = get_backend(storage_options(settings), metrics=StorageMetrics())
    except (TokenConfigurationError, StorageError) as exc:
        return (
            [
                fail(SETTINGS, str(exc)),
                skip(RECORD, "not tried: the settings are incomplete"),
                skip(TOKEN, "not tried: the settings are incomplete"),
            ],
            none,
            None,
        )
    try:
        store = sign_in_store(settings, backend)
        findings = [
            ok(
                SETTINGS,
                f"public client app {settings.delegated_client_id} of tenant {settings.tenant_id}; "
                f"the record is sealed with key {store.key_id}",
            )
        ]
        stored = await store.read()
        if stored.outcome is ReadOutcome.ABSENT:
            return (
                [
                    *findings,
                    fail(
                        RECORD,
                        f"nobody has signed in ({store.record_key} is absent); {SIGN_IN_ADVICE}",
                    ),
                    skip(TOKEN, "not tried: nobody has signed in"),
                ],
                none,
                None,
            )
        if stored.record is None:
            advice = (
                "set ENTRABOT_DELEGATED_TOKEN_KEY to the key the sign-in used, or sign in again"
                if stored.unreadable is Unreadable.WRONG_KEY
                else f"{SIGN_IN_ADVICE} again"
            )
            return (
                [
                    *findings,
                    fail(RECORD, f"{stored.detail}; {advice}"),
                    skip(TOKEN, "not tried: the record does not open"),
                ],
                none,
                None,
            )
        record = stored.record
        findings.append(
            ok(
                RECORD,
                f"{record.person.describe()} signed in {format_timestamp(record.signed_in_at)} "
                f"(sign-in {record.generation}); {record.refreshes} refresh(es) since, the last "
                f"by {record.refreshed_by} at {format_timestamp(record.refreshed_at)}",
            )
        )
        provider = delegated_token_provider(
            settings, backend, http, replica_id="doctor", metrics=Metrics()
        )
        try:
            token = await provider.get_token(GRAPH_SCOPE)
        except GraphError as exc:
            return [*findings, fail(TOKEN, str(exc))], none, record.person
        findings.append(
            ok(
                TOKEN,
                f"token for {record.person.describe()}, valid until "
                f"{format_timestamp(_utc(token.expires_on))}",
            )
        )
        return findings, IdentityChain(provider, token, None), record.person
    finally:
        await backend.aclose()


def _utc(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, timezone.utc)

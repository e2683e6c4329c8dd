"""Fixtures for the emulator's conformance tests: a tenant, a running emulator on a manual clock, and
token helpers (see emulator_testkit)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from emulator import ManualClock, RunningEmulator, Seed, ThrottleBudget, build_seed, start_emulator
from emulator.dev_credentials import (
    DevCertificate,
    DevIssuer,
    make_certificate,
    make_issuer,
    with_blueprint_credentials,
)
from emulator.seed import AgentIdentity
from tests.emulator.emulator_testkit import SIBLING_IDENTITY, Entra, bearer


@pytest.fixture(scope="session")
def certificate() -> DevCertificate:
    return make_certificate()


@pytest.fixture(scope="session")
def issuer() -> DevIssuer:
    return make_issuer("https://oidc.test.local/cluster")


@pytest.fixture(scope="session")
def seed(certificate: DevCertificate, issuer: DevIssuer) -> Seed:
    # Graph's limits off: these conformance tests check shapes and rules, many requests a second;
    # test_emulator_limits.py checks the limits on a tenant of its own.
    base = with_blueprint_credentials(
        build_seed(
            chats=3, humans=3, history=3, throttle=ThrottleBudget.relaxed(), shared_mailboxes=True
        ),
        certificate=certificate,
        issuer=issuer,
    )
    # A second agent identity of the same blueprint, as a blueprint with several agents has.
    sibling = AgentIdentity(
        id=SIBLING_IDENTITY, display_name="Sibling agent", blueprint_app_id=base.blueprint.app_id
    )
    return Seed.model_validate(
        {
            **base.model_dump(),
            "agent_identities": [
                *(a.model_dump() for a in base.agent_identities),
                sibling.model_dump(),
            ],
        }
    )


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime(2026, 11, 29, 10, 0, 0, tzinfo=timezone.utc))


@pytest.fixture(scope="session")
def signing_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture
def emu(
    seed: Seed, clock: ManualClock, signing_key: rsa.RSAPrivateKey
) -> Iterator[RunningEmulator]:
    with start_emulator(seed, clock=clock, signing_key=signing_key) as running:
        yield running


@pytest.fixture(scope="session")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10) as client:
        yield client


@pytest.fixture
def entra(emu: RunningEmulator, http: httpx.Client) -> Entra:
    return Entra(emu, http)


@pytest.fixture
def agent(entra: Entra) -> dict[str, str]:
    """Authorization headers for the agent user (three hops)."""
    return bearer(entra.agent_token())


@pytest.fixture
def ada(entra: Entra, seed: Seed) -> dict[str, str]:
    """Authorization headers for Ada, the sponsor (password grant)."""
    return bearer(entra.human_token(seed.humans[0].user_principal_name))

"""`entrabot-fleet signin`, run as the operator runs it: a process configured by its environment, the
emulator's device-code endpoints over HTTP, the record written to an Azurite container.

The person's part (opening the page, typing the code) is the emulator's admin approval of the code the
command printed. What is checked: the code and page are shown and the command waits for them; the
sign-in is stored sealed (the blob holds neither the refresh token nor who signed in); a decline and
a wait past the timeout end with one line and exit 1; signing in as someone else needs --replace; a
missing setting is named with exit 2.
"""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from sign_in_kit import approve_pending_code, new_token_key

from emulator.server import RunningEmulator
from service.devstack.azurite import Azurite
from service.devstack.dev_environment import replica_environment
from service.devstack.emulator_env import delegated_env
from service.ledger.records.reads import ReadOutcome
from service.signin.record import SIGN_IN_KEY
from service.signin.sealing import SealingKey
from service.signin.store import SignInStore
from service.storage.blob import BlobBackend

pytestmark = [pytest.mark.azurite]

RUN_BOUND_S = 60.0
_CODE = re.compile(r"enter the code (\w+)")


@dataclass
class Setup:
    env: dict[str, str]
    key: str
    store: SignInStore
    backend: BlobBackend


@pytest.fixture
async def setup(
    emulator: RunningEmulator, azurite: Azurite, blob_backend: BlobBackend, container_name: str
) -> AsyncIterator[Setup]:
    key = new_token_key()
    env = {
        **replica_environment(),
        **delegated_env(emulator.seed, base_url=emulator.base_url, token_key=key),
        "ENTRABOT_BLOB_ENDPOINT": azurite.blob_endpoint,
        "ENTRABOT_BLOB_CONTAINER": container_name,
        "ENTRABOT_BLOB_CONNECTION_STRING": azurite.connection_string,
    }
    yield Setup(env, key, SignInStore(blob_backend, SealingKey.from_setting(key)), blob_backend)


@dataclass
class Finished:
    code: int
    out: str
    err: str


async def signin(
    setup: Setup,
    *args: str,
    approve_as: str | None = None,
    decline: bool = False,
    env: dict[str, str] | None = None,
) -> Finished:
    """Run the command; once it prints a code, the person approves (or declines) it, unless nobody does."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "service.cli",
        "signin",
        *args,
        env=env or setup.env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    lines: list[str] = []
    try:
        async with httpx.AsyncClient(timeout=10) as http:

            async def read_out() -> None:
                assert proc.stdout is not None
                async for raw in proc.stdout:
                    line = raw.decode()
                    lines.append(line)
                    found = _CODE.search(line)
                    if found and (approve_as or decline):
                        emu_url = setup.env["ENTRABOT_AUTHORITY"]
                        await approve_pending_code(
                            http,
                            _Emu(emu_url),
                            approve_as or "",
                            user_code=found.group(1),
                            decline=decline,
                        )

            _, err = await asyncio.wait_for(
                asyncio.gather(read_out(), proc.stderr.read()), RUN_BOUND_S
            )
            await asyncio.wait_for(proc.wait(), RUN_BOUND_S)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return Finished(proc.returncode, "".join(lines), err.decode())


@dataclass
class _Emu:
    """The admin URL of the emulator the command talks to (what approve_pending_code needs of it)."""

    base_url: str

    @property
    def admin_url(self) -> str:
        return self.base_url + "/_emulator"


async def test_signin_shows_the_code_waits_and_stores_the_sign_in_sealed(
    setup: Setup, emulator: RunningEmulator
) -> None:
    ada = emulator.seed.humans[0]
    done = await signin(setup, approve_as=ada.user_principal_name)
    assert done.code == 0, done.err
    assert f"{emulator.base_url}/devicelogin" in done.out and _CODE.search(done.out)
    assert f"signed in as {ada.display_name} ({ada.user_principal_name})" in done.out
    stored = await setup.store.read()
    assert stored.outcome is ReadOutcome.PRESENT and stored.record is not None
    assert stored.record.person.object_id == ada.id and stored.record.generation == 1
    raw = await setup.backend.read_text(SIGN_IN_KEY)
    assert raw is not None
    secrets = (
        stored.record.refresh_token,
        *(t.token for t in stored.record.access_tokens.values()),
    )
    for secret in secrets:
        assert secret not in raw and secret not in done.out + done.err
    assert ada.user_principal_name not in raw and ada.id not in raw  # who signed in is sealed too


async def test_a_declined_sign_in_ends_with_one_line_and_writes_nothing(
    setup: Setup, emulator: RunningEmulator
) -> None:
    done = await signin(setup, decline=True)
    assert done.code == 1 and "authorization_declined" in done.err and "nothing written" in done.err
    assert (await setup.store.read()).outcome is ReadOutcome.ABSENT


async def test_nobody_signing_in_ends_the_wait_at_the_timeout(setup: Setup) -> None:
    done = await signin(setup, "--timeout", "3")
    assert done.code == 1 and "within 3 s" in done.err and "run the command again" in done.err
    assert (await setup.store.read()).outcome is ReadOutcome.ABSENT


async def test_signing_in_as_someone_else_needs_replace(
    setup: Setup, emulator: RunningEmulator
) -> None:
    ada, grace = emulator.seed.humans[0], emulator.seed.humans[1]
    assert (await signin(setup, approve_as=ada.user_principal_name)).code == 0
    refused = await signin(setup, approve_as=grace.user_principal_name)
    assert refused.code == 1 and "--replace" in refused.err and ada.display_name in refused.err
    record = (await setup.store.read()).record
    assert record is not None and record.person.object_id == ada.id
    replaced = await signin(setup, "--replace", approve_as=grace.user_principal_name)
    assert replaced.code == 0 and "restart the replicas" in replaced.out
    record = (await setup.store.read()).record
    assert record is not None and record.person.object_id == grace.id and record.generation == 2


async def test_signing_in_again_as_the_same_person_needs_no_flag(
    setup: Setup, emulator: RunningEmulator
) -> None:
    ada = emulator.seed.humans[0]
    assert (await signin(setup, approve_as=ada.user_principal_name)).code == 0
    again = await signin(setup, approve_as=ada.user_principal_name)
    assert again.code == 0, again.err
    record = (await setup.store.read()).record
    assert record is not None and record.generation == 2


@pytest.mark.parametrize(
    "unset, named",
    [
        ("ENTRABOT_DELEGATED_CLIENT_ID", "ENTRABOT_DELEGATED_CLIENT_ID"),
        ("ENTRABOT_DELEGATED_TOKEN_KEY", "ENTRABOT_DELEGATED_TOKEN_KEY"),
        ("ENTRABOT_AUTH_MODE", "ENTRABOT_AUTH_MODE=delegated"),
    ],
)
async def test_a_missing_setting_is_named_with_exit_2(setup: Setup, unset: str, named: str) -> None:
    env = {k: v for k, v in setup.env.items() if k != unset}
    done = await signin(setup, env=env)
    assert done.code == 2 and named in done.err, done.err
    assert (await setup.store.read()).outcome is ReadOutcome.ABSENT

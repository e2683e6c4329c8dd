"""Signing a person in, as a test does it: the device-code flow walked for real against the emulator,
the person's approval given through the emulator's admin API once the code is pending."""

from __future__ import annotations

import base64
import os
from typing import Any, Protocol

import httpx
from eventually import eventually
from settings_env import settings_from_env

from emulator.seed import Seed, build_seed
from emulator.server import RunningEmulator
from service.config import Settings
from service.devstack.emulator_env import delegated_env
from service.from_settings.signin import sign_in_flow
from service.signin.record import SignInRecord
from service.storage.backend import MemoryBackend
from service.telemetry.metrics import GraphMetrics


def new_token_key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def delegated_seed(**build: Any) -> Seed:
    """A built seed whose device codes may be polled every second (Entra says 5)."""
    return build_seed(**build).model_copy(update={"device_code_interval_s": 1})


def delegated_settings(emulator: RunningEmulator, token_key: str, **fields: str) -> Settings:
    env = delegated_env(emulator.seed, base_url=emulator.base_url, token_key=token_key)
    return settings_from_env({**env, **{f"ENTRABOT_{k.upper()}": v for k, v in fields.items()}})


class AdminSite(Protocol):
    """Where the emulator's admin API is (a RunningEmulator, or just its address)."""

    @property
    def admin_url(self) -> str: ...


async def approve_pending_code(
    http: httpx.AsyncClient,
    emulator: AdminSite,
    person: str,
    *,
    user_code: str | None = None,
    decline: bool = False,
) -> str:
    """Wait for a pending device code (``user_code``, or any) and approve it as ``person`` (id or UPN)."""

    async def pending() -> str | None:
        codes = (await http.get(f"{emulator.admin_url}/devicecodes")).json()["device_codes"]
        return next(
            (
                c["user_code"]
                for c in codes
                if c["state"] == "pending" and user_code in (None, c["user_code"])
            ),
            None,
        )

    code: str = await eventually(pending, "a pending device code")
    response = await http.post(
        f"{emulator.admin_url}/devicecodes/approve",
        json={"user_code": code, "user": person, "decline": decline},
    )
    assert response.status_code == 201, response.text
    return code


async def sign_in_as(
    emulator: RunningEmulator,
    settings: Settings,
    backend: MemoryBackend,
    person: str,
    *,
    replace: bool = True,
) -> SignInRecord:
    """What `entrabot-fleet signin` does, in this process, with ``person`` approving the code."""
    async with httpx.AsyncClient(timeout=30) as http:
        flow = sign_in_flow(settings, backend, http, metrics=GraphMetrics())
        code = await flow.start()
        await approve_pending_code(http, emulator, person, user_code=code.user_code)
        grant = await flow.wait(code, timeout_s=30)
        return (await flow.save(grant, await flow.who(grant), replace=replace)).record

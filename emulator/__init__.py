"""A Microsoft Graph + Entra emulator: one tenant's token endpoint, Graph v1.0 chats, messages, mail,
users and sponsors, change-notification subscriptions delivered to loopback webhooks, with Graph's rules,
throttling, fault injection and request statistics.

Layout: ``{base}/v1.0/...`` (Graph), ``{base}/{tenant}/oauth2/v2.0/token`` (Entra),
``{base}/_emulator/...`` (admin).
"""

from emulator.app import create_app
from emulator.clock import ManualClock, ManualMonotonic, SystemClock
from emulator.seed import Seed, ThrottleBudget, build_seed, demo_seed_path, load_seed
from emulator.server import RunningEmulator, serve, start_emulator

__all__ = [
    "ManualClock",
    "ManualMonotonic",
    "RunningEmulator",
    "Seed",
    "SystemClock",
    "ThrottleBudget",
    "build_seed",
    "create_app",
    "demo_seed_path",
    "load_seed",
    "serve",
    "start_emulator",
]

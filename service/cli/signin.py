"""``signin``: delegated mode's device-code sign-in."""

from __future__ import annotations

import argparse
import asyncio

from service.cli.common import (
    EXIT_OK,
    Command,
    CommandFailed,
    ConfigurationError,
    open_target,
    settings_or_exit,
)
from service.storage.errors import StorageError

DEFAULT_TIMEOUT_S = 900.0  # Entra's device codes last 15 minutes


def configure_signin(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--replace",
        action="store_true",
        help="sign in as someone other than the person the container holds (then restart the replicas)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"give up waiting for the person after this long (default {DEFAULT_TIMEOUT_S:.0f}, "
        "the code's own lifetime)",
    )


def run_signin(args: argparse.Namespace) -> int:
    return asyncio.run(signin(replace=args.replace, timeout_s=args.timeout))


async def signin(*, replace: bool, timeout_s: float) -> int:
    from service.graph.errors import TokenConfigurationError
    from service.from_settings.signin import check_sign_in_settings, sign_in_with_settings
    from service.signin.flow import SignInEnded

    if timeout_s <= 0:
        raise ConfigurationError("--timeout must be a positive number of seconds")
    settings = settings_or_exit()
    try:
        check_sign_in_settings(settings)
    except TokenConfigurationError as exc:
        raise ConfigurationError(str(exc)) from exc
    backend = await open_target(settings)
    try:
        print(f"state: {backend.describe()}")
        await sign_in_with_settings(settings, backend, replace=replace, timeout_s=timeout_s)
    except SignInEnded as exc:
        raise CommandFailed(str(exc)) from None
    except StorageError as exc:
        raise CommandFailed(
            f"the sign-in could not be stored ({type(exc).__name__}: {exc}); run the command again"
        ) from None
    finally:
        await backend.aclose()
    return EXIT_OK


COMMAND = Command(
    "signin",
    "delegated mode: a person signs the fleet in by device code (shows the code and page, waits)",
    configure_signin,
    run_signin,
)

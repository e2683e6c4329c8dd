"""``entrabot-fleet signin``: a person signs the fleet in by device code, once for every replica.

The code and the page go to stdout (what the person must read, even through a pipe); the countdown to
stderr, as a bar on a terminal and a line a minute elsewhere. Nothing secret is printed: not the
device code, not a token.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TextIO

from service.graph.errors import GraphError
from service.signin.flow import SignInEnded, SignInFlow
from service.signin.public_client import EntraUnreachable, SignInRefused
from service.storage.backend import MemoryBackend

_LINE_EVERY_S = 60.0


async def sign_in(
    flow: SignInFlow,
    backend: MemoryBackend,
    *,
    replace: bool,
    timeout_s: float,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
) -> None:
    """Sign in and store the record in ``backend``; SignInEnded says why not."""
    try:
        code = await flow.start()
        print(
            code.message
            or f"To sign in, open {code.verification_uri} and enter the code {code.user_code}.",
            file=out,
            flush=True,
        )
        with Countdown(err) as tick:
            grant = await flow.wait(code, timeout_s=timeout_s, on_wait=tick)
        person = await flow.who(grant)
    except SignInRefused as exc:
        raise SignInEnded(f"{exc}; nothing written") from None
    except EntraUnreachable as exc:
        raise SignInEnded(f"{exc}; nothing written") from None
    except GraphError as exc:
        raise SignInEnded(
            f"signed in, but Graph's /me refused the new token ({exc}); check the app "
            "registration's Graph permissions (User.Read at least). Nothing written"
        ) from None
    stored = await flow.save(grant, person, replace=replace)
    print(
        f"signed in as {stored.record.person.describe()}; the sign-in is sealed in {flow.store.record_key} "
        f"({backend.describe()}), sign-in {stored.record.generation} of this container",
        file=out,
        flush=True,
    )
    if stored.replaced is not None:
        print(
            f"this replaces the sign-in of {stored.replaced.describe()}: restart the replicas so they act for "
            f"{stored.record.person.describe()}",
            file=out,
            flush=True,
        )
    else:
        print(
            "replicas use it from their next Graph call; start them now if they are waiting for a sign-in",
            file=out,
            flush=True,
        )


class Countdown:
    """The seconds left, as a tqdm bar on a terminal, else a line a minute (logs and pipes stay readable)."""

    def __init__(self, err: TextIO) -> None:
        self._err = err
        self._close: Callable[[], None] = lambda: None
        self._last_line: float | None = None

    def __enter__(self) -> Callable[[float], None]:
        if self._err.isatty():
            from tqdm import tqdm

            bar = tqdm(
                desc="waiting for the sign-in", file=self._err, leave=False, bar_format="{desc}"
            )
            self._close = bar.close

            def tick(remaining: float) -> None:
                bar.set_description_str(f"waiting for the sign-in, {remaining:.0f} s left")

            return tick

        def line(remaining: float) -> None:
            if self._last_line is None or self._last_line - remaining >= _LINE_EVERY_S:
                self._last_line = remaining
                print(
                    f"waiting for the sign-in ({remaining:.0f} s left)", file=self._err, flush=True
                )

        return line

    def __exit__(self, *exc: object) -> None:
        self._close()

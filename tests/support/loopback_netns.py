"""Run a program (the real Claude Code) in a private network namespace that has loopback only.

Why this shape: inside ``unshare -n`` the machine's 127.0.0.1 is a different, empty loopback, so the
fleet, the Graph emulator and the fake model API the test started outside are out of reach too. Rather
than starting the whole stack inside the namespace (the test's fixtures run in pytest's own process), we
pass exactly the ports the program needs through Unix sockets, which live in the file system and so
cross network namespaces: inside, this module listens on 127.0.0.1:<port> and relays to
``<dir>/<port>.sock``; outside, ``unix_forwards`` relays that socket to 127.0.0.1:<port>. The program
sees the same URLs, and nothing else it tries (``api.anthropic.com``, a plugin marketplace clone) can
leave the machine. Without root (no ``unshare -n``) the program runs as is; the tests still give it
loopback addresses only. socat would do the relaying, but is not installed here; it is a few lines of
asyncio.

Inside: ``python -m tests.support.loopback_netns --sockets DIR --port P ... -- PROGRAM ARGS``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from functools import cache
from pathlib import Path

CHUNK = 65536
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def _splice(
    a: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    b: tuple[asyncio.StreamReader, asyncio.StreamWriter],
) -> None:
    await asyncio.gather(_pipe(a[0], b[1]), _pipe(b[0], a[1]))


@cache
def namespace_available() -> bool:
    """Root with ``unshare`` and ``ip``, and the kernel lets us make a network namespace."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        return False
    return (
        subprocess.run(["unshare", "-n", "true"], capture_output=True, timeout=10).returncode == 0
    )


def loopback_only(argv: Sequence[str], sockets: Path, ports: Sequence[int]) -> list[str]:
    """``argv`` wrapped to run in a loopback-only namespace reaching ``ports`` (as is, without root)."""
    if not namespace_available():
        return list(argv)
    port_args = [a for p in ports for a in ("--port", str(p))]
    return [
        "unshare",
        "-n",
        sys.executable,
        "-m",
        "tests.support.loopback_netns",
        "--sockets",
        str(sockets),
        *port_args,
        "--",
        *argv,
    ]


@asynccontextmanager
async def unix_forwards(sockets: Path, ports: Sequence[int]) -> AsyncIterator[None]:
    """Outside the namespace: ``<sockets>/<port>.sock`` relays to 127.0.0.1:<port>, for each port."""
    sockets.mkdir(parents=True, exist_ok=True)

    def relay(port: int) -> Handler:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                upstream = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                writer.close()
                return
            await _splice((reader, writer), upstream)

        return handle

    servers = [
        await asyncio.start_unix_server(relay(p), path=str(sockets / f"{p}.sock")) for p in ports
    ]
    try:
        yield
    finally:
        for server in servers:
            server.close()


async def _inside(sockets: Path, ports: Sequence[int], argv: Sequence[str]) -> int:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)

    def relay(port: int) -> Handler:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                upstream = await asyncio.open_unix_connection(str(sockets / f"{port}.sock"))
            except OSError:
                writer.close()
                return
            await _splice((reader, writer), upstream)

        return handle

    servers = [await asyncio.start_server(relay(p), "127.0.0.1", p) for p in ports]
    child = await asyncio.create_subprocess_exec(*argv)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, child.send_signal, sig)
    # A terminal's Ctrl-C reaches the whole foreground group; the program decides what it means.
    loop.add_signal_handler(signal.SIGINT, lambda: None)
    code = await child.wait()
    for server in servers:
        server.close()
    return code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sockets", type=Path, required=True)
    parser.add_argument("--port", type=int, action="append", default=[])
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        parser.error("name the program to run after --")
    sys.exit(asyncio.run(_inside(args.sockets, args.port, argv)))


if __name__ == "__main__":
    main()

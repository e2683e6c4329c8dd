"""python -m emulator --seed FILE --port N"""

from __future__ import annotations

import argparse
import sys

from emulator.seed import demo_seed_path
from emulator.server import ListenError, serve


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m emulator", description="Serve the Graph and Entra emulator."
    )
    parser.add_argument(
        "--seed", default=str(demo_seed_path()), help="tenant seed JSON (default: the demo tenant)"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8088, help="0 picks a free port")
    parser.add_argument(
        "--public-url",
        default=None,
        help="the URL clients use, when it differs from host:port (e.g. behind compose)",
    )
    parser.add_argument(
        "--fractional-retry-after",
        action="store_true",
        help="answer a throttled request's exact wait (e.g. 0.42) instead of whole seconds as Graph does",
    )
    args = parser.parse_args(argv)
    try:
        serve(
            args.seed,
            args.host,
            args.port,
            public_url=args.public_url,
            fractional_retry_after=args.fractional_retry_after,
        )
    except ListenError as exc:
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

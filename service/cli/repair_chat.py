"""``repair-chat``: re-bootstrap one chat whose cursor is corrupt."""

from __future__ import annotations

import argparse
import asyncio
from typing import TYPE_CHECKING

from service.cli.common import (
    EXIT_OK,
    Command,
    CommandFailed,
    ConfigurationError,
    open_target,
    settings_or_exit,
)
from service.storage.backend import MemoryBackend
from service.storage.errors import StorageError

if TYPE_CHECKING:
    from service.chat_repair import StoredCursor
    from service.config import Settings


def configure_repair_chat(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "chat_id", metavar="CHAT_ID", help="the Teams chat id (as /readyz lists it)"
    )
    parser.add_argument(
        "--yes",
        action="store_true",
        help="write the new cursor (without it: show what would be written, write nothing)",
    )


def run_repair_chat(args: argparse.Namespace) -> int:
    return asyncio.run(repair_chat(args.chat_id, write=args.yes))


async def repair_chat(chat_id: str, *, write: bool) -> int:
    from service.chat_repair import CursorState, inspect_cursor

    if not chat_id.strip():
        raise ConfigurationError(
            "CHAT_ID is empty; pass the chat id /readyz lists under corrupt_chat_cursors"
        )
    settings = settings_or_exit()
    backend = await open_target(settings)
    try:
        print(f"state: {backend.describe()}")
        try:
            stored = await inspect_cursor(backend, chat_id)
        except StorageError as exc:
            raise CommandFailed(
                f"could not read the cursor of chat {chat_id} ({type(exc).__name__}: {exc}); "
                "nothing written"
            ) from None
        if stored.state is CursorState.READABLE:
            print(f"chat {chat_id}: the cursor {stored.key} is readable; nothing to repair")
            return EXIT_OK
        if stored.state is CursorState.NO_ETAG:
            raise CommandFailed(
                f"the store returned {stored.key} without an ETag, so it cannot be replaced by "
                "compare-and-swap; nothing written (check the storage endpoint or proxy)"
            )
        return await _repair_from_graph(settings, backend, chat_id, stored, write=write)
    finally:
        await backend.aclose()


async def _repair_from_graph(
    settings: Settings, backend: MemoryBackend, chat_id: str, stored: StoredCursor, *, write: bool
) -> int:
    from service.chat_repair import CursorState, plan_repair, write_repair
    from service.graph.client import GraphClient
    from service.graph.options import GraphOptions
    from service.telemetry.metrics import Metrics
    from service.replica_clients import replica_tokens
    from service.graph.errors import GraphConnectionError, GraphError, GraphForbidden, GraphNotFound
    from service.graph.errors import TokenConfigurationError
    from service.graph.http_pool import new_http_client
    from service.clock import utc_now
    from service.storage.errors import ConcurrencyError

    async with new_http_client(read_timeout_s=settings.graph_timeout_s) as http:
        try:
            metrics = Metrics()
            tokens = replica_tokens(
                settings, backend, http, replica_id="repair-chat", metrics=metrics
            )
            graph = GraphClient(
                GraphOptions(settings.graph_url), tokens, http=http, metrics=metrics.graph
            )
        except (TokenConfigurationError, ValueError) as exc:
            raise ConfigurationError(str(exc)) from exc
        try:
            newest = await graph.messages.get_newest_chat_message(chat_id)
        except (GraphNotFound, GraphForbidden) as exc:
            raise CommandFailed(
                f"Graph does not show chat {chat_id} to the agent user (HTTP {exc.status}); "
                "check the chat id; nothing written"
            ) from None
        except GraphConnectionError as exc:
            raise CommandFailed(
                f"{exc}; check ENTRABOT_GRAPH_URL ({settings.graph_url}) and the network path to "
                "it; nothing written"
            ) from None
        except GraphError as exc:
            raise CommandFailed(f"{type(exc).__name__}: {exc}; nothing written") from None
    if stored.state is CursorState.ABSENT:
        print(
            f"chat {chat_id}: no cursor yet, nothing to repair (a replica bootstraps it when it first sees "
            "the chat)"
        )
        return EXIT_OK
    now = utc_now()
    plan = plan_repair(chat_id, newest, now=now)
    print(
        f"chat {chat_id}: the cursor {stored.key} is corrupt ({stored.problem}); the chat is stalled on "
        "every replica"
    )
    for line in plan.describe(now):
        print(f"  {line}")
    if not write:
        print("dry run: nothing written; rerun with --yes to write this cursor")
        return EXIT_OK
    try:
        await write_repair(backend, stored, plan)
    except ConcurrencyError:
        raise CommandFailed(
            f"the cursor of chat {chat_id} changed since it was read (another repair?); nothing "
            "written; run the command again to see its state"
        ) from None
    except StorageError as exc:
        raise CommandFailed(
            f"writing the cursor of chat {chat_id} failed ({type(exc).__name__}: {exc}); run the "
            "command again to see whether it landed"
        ) from None
    print(
        f"repaired: wrote {stored.key} over the corrupt value (If-Match on its ETag); replicas poll the chat "
        "again on their next cycle"
    )
    return EXIT_OK


COMMAND = Command(
    "repair-chat",
    "re-bootstrap one chat whose cursor is corrupt, as a first sight does (never replays history)",
    configure_repair_chat,
    run_repair_chat,
)

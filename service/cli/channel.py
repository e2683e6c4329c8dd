"""``channel``: a stdio MCP server for one Claude Code host."""

from __future__ import annotations

import argparse

from service.cli.common import Command, ConfigurationError


def configure_channel(parser: argparse.ArgumentParser) -> None:
    from service.bridge.cli_options import add_channel_options

    add_channel_options(parser)


def run_channel(args: argparse.Namespace) -> int:
    from service.bridge.cli_options import run_channel_command

    return run_channel_command(args, ConfigurationError)


COMMAND = Command(
    "channel",
    "a stdio MCP server for one Claude Code host: the fleet's tools and pushes as a channel",
    configure_channel,
    run_channel,
)

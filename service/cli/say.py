"""``say``: a seeded person of the local emulator posts in a chat, or mails the agent user."""

from __future__ import annotations

import argparse
from pathlib import Path

from service.cli.common import Command, CommandFailed, ConfigurationError


def configure_say(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("text", help="what the person writes")
    parser.add_argument(
        "--from",
        dest="person",
        metavar="PERSON",
        help="who writes: a seeded person's name, first name, UPN or id (default: the chat's first)",
    )
    parser.add_argument(
        "--chat",
        metavar="N|ID",
        help="the chat: its number in `up`'s list, or its id (default: the first the person is in)",
    )
    parser.add_argument("--mail", action="store_true", help="mail the agent user instead")
    parser.add_argument("--subject", default="", help="the mail's subject (with --mail)")
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="the running `up`'s state folder (default: the one `up` uses by default)",
    )
    parser.add_argument(
        "--emulator-url",
        metavar="URL",
        help="the Graph emulator to post to (default: the running `up`'s)",
    )


def run_say(args: argparse.Namespace) -> int:
    from service.devstack.local_state import default_state_dir, read_state
    from service.devstack.say import SayError, SayRequest, say

    state_dir = args.state_dir or default_state_dir()
    state = read_state(state_dir)
    url = args.emulator_url or (state.emulator_url if state is not None else None)
    if url is None:
        raise ConfigurationError(
            f"--emulator-url: not given, and no local fleet is running (no live state in "
            f"{state_dir}); start one with `entrabot-fleet up`, or pass --emulator-url"
        )
    request = SayRequest(args.text, args.person, args.chat, args.mail, args.subject)
    try:
        said = say(url, request, state)
    except SayError as exc:
        raise (ConfigurationError if exc.usage else CommandFailed)(str(exc)) from None
    print(said.line())
    return 0


COMMAND = Command(
    "say",
    "make a seeded person of the local emulator post in a chat or mail the agent user",
    configure_say,
    run_say,
)

"""``entrabot-fleet say``: a seeded person of the local emulator posts in a chat or mails the agent user.

Through the emulator's own controls (``emulator/routes_admin.py``: ``POST /_emulator/chats/{id}/messages``
and ``POST /_emulator/mail``), which store the message as Graph would have: the fleet finds it the way
it finds a real person's. Unauthenticated, as the emulator's controls are: a local tool.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from service.devstack.local_state import LocalFleetState

TIMEOUT_S = 10.0


class SayError(Exception):
    """The post could not be made; the message says what to fix. ``usage`` marks a wrong argument."""

    def __init__(self, message: str, *, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage


@dataclass(frozen=True)
class Person:
    id: str
    upn: str
    display_name: str


@dataclass(frozen=True)
class SayRequest:
    text: str
    person: str | None  # --from: a name, first name, UPN or id
    chat: str | None  # --chat: a number from `up`'s list, or a chat id
    mail: bool = False
    subject: str = ""


@dataclass(frozen=True)
class Said:
    """What was posted: ids, never the text (it may be anything a person would write)."""

    kind: str  # "chat" or "mail"
    message_id: str
    person: Person
    chat_id: str | None = None

    def line(self) -> str:
        who = f"{self.person.display_name} <{self.person.upn}>"
        if self.chat_id is None:
            return f"mailed the agent user as {who}: message {self.message_id}"
        return f"posted message {self.message_id} in chat {self.chat_id} as {who}"


def say(emulator_url: str, request: SayRequest, state: LocalFleetState | None) -> Said:
    with httpx.Client(base_url=emulator_url.rstrip("/"), timeout=TIMEOUT_S) as http:
        tenant = _get(http, "/_emulator/tenant", emulator_url)
        people = [
            Person(str(u["id"]), str(u["upn"]), str(u["display_name"]))
            for u in tenant["users"]
            if not u["agent"]
        ]
        if request.mail:
            person = find_person(people, request.person or people[0].upn)
            return _mail(http, str(tenant["agent_user_upn"]), person, request)
        if request.person:
            person = find_person(people, request.person)
            chat_id, members = _chat(request, state, person.display_name)
            if members and person.display_name not in members:
                raise SayError(
                    f"{person.display_name} is not in chat {request.chat} "
                    f"({', '.join(members)}); pick another --chat or --from",
                    usage=True,
                )
        else:
            chat_id, members = _chat(request, state, None)
            person = find_person(people, members[0] if members else "")
        posted = _post(
            http,
            f"/_emulator/chats/{chat_id}/messages",
            {"from_user": person.id, "content": request.text},
        )
        return Said("chat", str(posted["id"]), person, chat_id)


def find_person(people: list[Person], wanted: str) -> Person:
    """The one person ``wanted`` names: their id, UPN, the UPN's name part, display name or first
    name (any case)."""
    key = wanted.strip().casefold()

    def names(p: Person) -> set[str]:
        return {
            p.id.casefold(),
            p.upn.casefold(),
            p.upn.split("@")[0].casefold(),
            p.display_name.casefold(),
            p.display_name.split()[0].casefold() if p.display_name else "",
        }

    found = [p for p in people if key and key in names(p)]
    if len(found) == 1:
        return found[0]
    known = ", ".join(p.display_name for p in people)
    what = "names more than one" if found else "is nobody"
    raise SayError(f"--from {wanted!r} {what} in the tenant; the people: {known}", usage=True)


def _chat(
    request: SayRequest, state: LocalFleetState | None, sender: str | None
) -> tuple[str, list[str]]:
    """The chat id and its people's names (known only for a chat from ``up``'s list). No --chat: the
    first of ``up``'s chats the sender is in."""
    wanted = (request.chat or "").strip()
    if state is not None and not wanted:
        for chat in state.chats:
            if sender is None or sender in chat.member_names:
                return chat.id, chat.member_names
        raise SayError(f"{sender} is in none of the agent user's chats; pass --chat", usage=True)
    if state is not None and wanted.isdigit():
        index = int(wanted) - 1
        if not 0 <= index < len(state.chats):
            raise SayError(
                f"--chat {wanted} is not in the list of {len(state.chats)} chats `up` printed",
                usage=True,
            )
        return state.chats[index].id, state.chats[index].member_names
    if not wanted or wanted.isdigit():
        raise SayError(
            "--chat N needs the running fleet's list: without `entrabot-fleet up`'s state, "
            "give --chat a chat id",
            usage=True,
        )
    known = {c.id: c.member_names for c in state.chats} if state is not None else {}
    if wanted not in known and sender is None:
        raise SayError(
            f"--chat {wanted} is not one of `up`'s chats: name the sender with --from", usage=True
        )
    return wanted, known.get(wanted, [])


def _mail(http: httpx.Client, agent_upn: str, person: Person, request: SayRequest) -> Said:
    posted = _post(
        http,
        "/_emulator/mail",
        {
            "to": agent_upn,
            "from": person.upn,
            "from_name": person.display_name,
            "subject": request.subject,
            "body": request.text,
        },
    )
    return Said("mail", str(posted["id"]), person)


def _get(http: httpx.Client, path: str, url: str) -> dict[str, Any]:
    try:
        response = http.get(path)
    except httpx.HTTPError as exc:
        raise SayError(
            f"no emulator answers at {url} ({type(exc).__name__}): is `entrabot-fleet up` running?"
        ) from None
    if response.status_code != 200:
        raise SayError(f"{url} answered {response.status_code}: is it the Graph emulator?")
    body: dict[str, Any] = response.json()
    return body


def _post(http: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    try:
        response = http.post(path, json=body)
    except httpx.HTTPError as exc:
        raise SayError(f"the emulator did not answer ({type(exc).__name__})") from None
    if response.status_code != 201:
        raise SayError(
            f"the emulator refused the post ({response.status_code}): {_reason(response)}"
        )
    posted: dict[str, Any] = response.json()
    return posted


def _reason(response: httpx.Response) -> str:
    try:
        error = response.json().get("error", {})
        return str(error.get("message") or response.text[:200])
    except ValueError:
        return response.text[:200]

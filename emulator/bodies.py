"""Reading a Graph request's JSON body: the 400 Graph gives when it is not a JSON object, and property
names matched in any case, as Graph matches them.

Graph binds the property names of a request body case-insensitively: Microsoft's Graph SDK for
Python (msgraph-sdk 1.65, run here) sends ``sendMail`` as ``{"Message": {"ToRecipients": ...}}``,
which the live service accepts (read, not run: issue 23 and the SDK's own samples, which are only
ever sent to live tenants). The routes read camelCase names; ``GraphBody`` resolves them to whatever
case the client wrote.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from starlette.requests import Request

from emulator.errors import bad_request


class GraphBody(dict[str, Any]):
    """A JSON object whose lookups (``[]``, ``get``, ``in``) ignore the case of property names; nested
    objects, also inside arrays, are GraphBody too. Iteration yields the names as the client wrote them."""

    def __init__(self, raw: dict[str, Any]) -> None:
        super().__init__((key, _wrapped(value)) for key, value in raw.items())
        self._spelled: dict[str, str] = {}
        for key in self:
            if key.casefold() in self._spelled:
                # Two spellings of one property: which one Graph would bind is not ours to guess.
                raise bad_request(
                    f"The property '{key}' appears twice in the request body, as "
                    f"'{self._spelled[key.casefold()]}' and '{key}'; send it once."
                )
            self._spelled[key.casefold()] = key

    def _spelling(self, key: str) -> str:
        return self._spelled.get(key.casefold(), key)

    def __getitem__(self, key: str) -> Any:
        return super().__getitem__(self._spelling(key))

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and super().__contains__(self._spelling(key))

    def get(self, key: str, default: Any = None) -> Any:
        return super().get(self._spelling(key), default)

    def names_other_than(self, names: Iterable[str]) -> set[str]:
        """The property names sent that are none of ``names``, in any case."""
        known = {name.casefold() for name in names}
        return {key for key in self if key.casefold() not in known}


def _wrapped(value: Any) -> Any:
    if isinstance(value, dict):
        return GraphBody(value)
    if isinstance(value, list):
        return [_wrapped(item) for item in value]
    return value


async def json_object(request: Request) -> GraphBody:
    try:
        body = await request.json()
    except ValueError:
        raise bad_request(
            "Unable to read JSON request payload. Please ensure Content-Type header is set and "
            "payload is of valid JSON format."
        ) from None
    if not isinstance(body, dict):
        raise bad_request("The request body must be a JSON object.")
    return GraphBody(body)

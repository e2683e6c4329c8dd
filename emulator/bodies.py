"""Reading a Graph request's JSON body, with the 400 Graph gives when it is not a JSON object."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from emulator.errors import bad_request


async def json_object(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        raise bad_request("Unable to read JSON request payload. Please ensure Content-Type header is set and "
                          "payload is of valid JSON format.") from None
    if not isinstance(body, dict):
        raise bad_request("The request body must be a JSON object.")
    return body

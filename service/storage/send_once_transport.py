"""The Blob SDK's aiohttp transport, minus aiohttp's silent resend of a request whose connection dropped.

aiohttp resends a PUT once when the connection fails after the request went out (it treats PUT as
idempotent). For Blob that is never safe: the first If-Match write may have committed, and its resend
gets 412 and reads as a lost race; a resent append block writes the line twice. This middleware turns
"the connection dropped after sending" into an error the caller sees, so the outcome stays unknown
rather than silently wrong. Reads are still retried, by the SDK's retry policy, which is visible and
bounded. (aiohttp has no public switch for this; a client middleware is its public hook.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import aiohttp

if TYPE_CHECKING:
    # The public name is resolved by a lazy module ``__getattr__``, which type checkers see as Any.
    from azure.core.pipeline.transport._aiohttp import AioHttpTransport
else:
    from azure.core.pipeline.transport import AioHttpTransport


class ConnectionLostAfterSend(aiohttp.ClientError):
    """The connection dropped after the request was sent: it may or may not have been applied."""


async def _no_silent_resend(
    request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
) -> aiohttp.ClientResponse:
    try:
        return await handler(request)
    except aiohttp.ClientConnectorError:
        raise  # never connected, nothing sent; aiohttp does not resend these either
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
        # Not the URL: it may carry a SAS.
        raise ConnectionLostAfterSend(
            f"connection lost after sending a {request.method}: {exc}"
        ) from exc


class SendOnceTransport(AioHttpTransport):
    """AioHttpTransport whose session sends every request at most once."""

    async def open(self) -> None:
        if self.session is None:
            # The session options AioHttpTransport would use, plus the middleware. Created here, not in
            # __init__, because an aiohttp session belongs to the running event loop.
            self.session = aiohttp.ClientSession(
                trust_env=True,
                cookie_jar=aiohttp.DummyCookieJar(),
                auto_decompress=False,
                middlewares=(_no_silent_resend,),
            )
        await super().open()  # type: ignore[no-untyped-call]  # azure-core leaves open() unannotated

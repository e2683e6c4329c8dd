"""A scripted fake Blob endpoint: answers what a test says, and records what it was asked.

Used for the answers Azurite never gives (401, 5xx, a dropped connection, no answer at all), so those
cases still go through the real SDK pipeline and our transport.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from service.devstack.azurite import ACCOUNT, ACCOUNT_KEY

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class FakeBlobEndpoint:
    url: str
    requests: list[tuple[str, str]] = field(default_factory=list)  # (method, path?query)
    authorizations: list[str] = field(default_factory=list)

    @property
    def connection_string(self) -> str:
        return f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};BlobEndpoint={self.url};"

    def count(self, method: str) -> int:
        return sum(1 for m, _ in self.requests if m == method)


def storage_error(status: int, code: str) -> web.Response:
    """A response shaped like the Blob service's errors (code in the header and in the XML body)."""
    body = f'<?xml version="1.0" encoding="utf-8"?><Error><Code>{code}</Code><Message>scripted</Message></Error>'
    return web.Response(
        status=status,
        body=body.encode(),
        headers={"x-ms-error-code": code, "Content-Type": "application/xml"},
    )


def answer(status: int, code: str) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        return storage_error(status, code)

    return handler


async def drop_connection(request: web.Request) -> web.StreamResponse:
    """Close the socket after the request arrived: the client cannot know whether it was applied."""
    assert request.transport is not None
    request.transport.close()
    return web.Response(status=200)


async def never_answer(request: web.Request) -> web.StreamResponse:
    """Hold the request until the client gives up (the handler is cancelled when it disconnects)."""
    await asyncio.Event().wait()
    return web.Response(status=200)


@dataclass(frozen=True)
class TlsFiles:
    cert: Path
    key: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, self.key)
        return context


def self_signed_loopback_tls(folder: Path) -> TlsFiles:
    """A certificate for 127.0.0.1 that is its own CA (the client trusts it via a CA bundle)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    files = TlsFiles(folder / "cert.pem", folder / "key.pem")
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return files


@asynccontextmanager
async def serve_fake_blob_endpoint(
    handler: Handler, tls: TlsFiles | None = None
) -> AsyncIterator[FakeBlobEndpoint]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    endpoint = FakeBlobEndpoint(f"{'https' if tls else 'http'}://127.0.0.1:{port}/{ACCOUNT}")

    async def record(request: web.Request) -> web.StreamResponse:
        endpoint.requests.append((request.method, request.path_qs))
        endpoint.authorizations.append(request.headers.get("Authorization", ""))
        await request.read()
        return await handler(request)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1)
    await runner.setup()
    try:
        await web.SockSite(runner, sock, ssl_context=tls.server_context() if tls else None).start()
        yield endpoint
    finally:
        await runner.cleanup()

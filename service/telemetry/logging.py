"""JSON logs, one object per line, with a last line of defence against leaking secrets or bodies.

Call sites already log only identifiers; ``RedactingFilter`` exists because one careless ``extra=``
would otherwise put a token or a message body into the log pipeline of every replica.

MCP session ids are secrets too: a session id plus the shared token is enough to take over a host's
push stream. Our call sites log ``session_ref(id)`` instead; the filter replaces anything shaped like
a session id in the MCP SDK's own lines (it prints them at INFO: "Created new transport with session
ID: …"), and the session part of delivery target ids, with that same reference.
"""

from __future__ import annotations

import hashlib
import logging
import re
import sys
from typing import TextIO

from pythonjsonlogger.json import JsonFormatter

# Field names whose values never reach a log line, whatever the caller passed.
_SENSITIVE_FIELDS = frozenset(
    {
        "body",
        "content",
        "text",
        "token",
        "access_token",
        "refresh_token",
        "assertion",
        "client_assertion",
        "client_secret",
        "secret",
        "password",
        "authorization",
        "connection_string",
    }
)
# Bearer tokens and JWT-shaped strings inside free text.
_JWT = re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")
_BEARER = re.compile(r"(?i)bearer\s+[A-Za-z0-9._~+/=-]{8,}")
_ACCOUNT_KEY = re.compile(r"(?i)(AccountKey|SharedAccessSignature|sig)=[^;&\s]+")
# The SDK's session ids are uuid4().hex (StreamableHTTPSessionManager); a test with a real session
# fails if the SDK changes the shape. Any 32-hex text is replaced in third-party lines (the SDK's,
# and the HTTP stacks' DEBUG lines that print headers), but not in our own: a Teams chat id is
# "19:<32 hex>@thread.v2", which operators need to read there, and our call sites never log a
# session id (they log ``session_ref``).
_SESSION_ID = re.compile(r"(?<![0-9A-Fa-f])[0-9a-f]{32}(?![0-9A-Fa-f])")
_OUR_LOGGERS = ("service", "emulator")
# Delivery target ids embed the session id (``push:<id>``, ``sponsor_wait:<id>:<wait>``).
_TARGET_ID = re.compile(r"\b(push|sponsor_wait):([0-9a-f]{32})(?![0-9A-Fa-f])")
_SESSION_FIELDS = frozenset({"session_id", "mcp_session_id"})
REDACTED = "[redacted]"
# Fields a library sets for its own console that mean nothing in JSON: uvicorn's ``color_message`` is
# the message again with ANSI colour escapes in it.
_CONSOLE_FIELDS = ("color_message",)
_CONSOLE_LIBRARY_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access")
# What every LogRecord carries; anything else on a record came from ``extra=``.
_RECORD_FIELDS = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
}


def session_ref(session_id: str | None) -> str:
    """A stable, non-reversible name for a session in logs: lines of one session still correlate."""
    if not session_id:
        return "-"
    return "session#" + hashlib.sha256(session_id.encode()).hexdigest()[:12]


def redact_text(text: str, *, any_hex_session: bool = False) -> str:
    if any_hex_session:
        text = _SESSION_ID.sub(lambda m: session_ref(m.group(0)), text)
    text = _TARGET_ID.sub(lambda m: f"{m.group(1)}:{session_ref(m.group(2))}", text)
    text = _JWT.sub(REDACTED, text)
    text = _BEARER.sub("Bearer " + REDACTED, text)
    return _ACCOUNT_KEY.sub(lambda m: f"{m.group(1)}={REDACTED}", text)


_TRACEBACKS = logging.Formatter()


class RedactingFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        sdk = record.name.split(".", 1)[0] not in _OUR_LOGGERS
        for name in _CONSOLE_FIELDS:
            record.__dict__.pop(name, None)
        for name in _SENSITIVE_FIELDS.intersection(record.__dict__):
            setattr(record, name, REDACTED)
        for name in _SESSION_FIELDS.intersection(record.__dict__):
            value = getattr(record, name)
            setattr(record, name, session_ref(value) if isinstance(value, str) else REDACTED)
        for name, value in list(record.__dict__.items()):
            if name not in _RECORD_FIELDS and isinstance(value, str):
                setattr(record, name, redact_text(value, any_hex_session=sdk))
        # Redact the formatted text, not the pieces: an argument may be bytes or an object whose repr
        # holds a secret (the SDK's and httpcore's DEBUG lines log whole payloads that way).
        if record.args or isinstance(record.msg, str):
            try:
                message = record.getMessage()
            except Exception:  # noqa: BLE001 - a malformed call (arguments not matching the format):
                message = f"{record.msg!s} {record.args!r}"  # keep what it said, never raise at the call site
            record.msg, record.args = redact_text(message, any_hex_session=sdk), None
        if record.exc_info:
            # Tracebacks are redacted whole: an exception's text may quote a session id from anywhere.
            record.exc_text = redact_text(
                _TRACEBACKS.formatException(record.exc_info), any_hex_session=True
            )
            record.exc_info = None
        if record.stack_info:
            record.stack_info = redact_text(record.stack_info, any_hex_session=True)
        return True


def configure_logging(
    level: str = "INFO", *, replica_id: str | None = None, stream: TextIO | None = None
) -> None:
    """Route every logger to one JSON handler on stderr (stdout stays free for CLI output)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    static = {"replica": replica_id} if replica_id else None
    handler.setFormatter(
        JsonFormatter(
            "{asctime}{levelname}{name}{message}",
            style="{",
            rename_fields={"asctime": "ts", "levelname": "level", "name": "logger"},
            static_fields=static,
        )
    )
    handler.addFilter(RedactingFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # httpx logs every request URL at INFO; URLs carry chat ids but also $filter noise.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("azure").setLevel(logging.WARNING)
    # uvicorn configures its loggers when a server starts (a console handler, no propagation, the
    # server's log_level): a server started earlier in this process would keep its lines from this
    # handler, its redaction and its JSON, or silence them.
    for name in _CONSOLE_LIBRARY_LOGGERS:
        library = logging.getLogger(name)
        library.handlers.clear()
        library.propagate = True
        library.disabled = False
        library.setLevel(logging.NOTSET)

"""JSON logs, one object per line, with a last line of defence against leaking secrets or bodies.

Call sites already log only identifiers; ``RedactingFilter`` exists because one careless ``extra=``
would otherwise put a token or a message body into the log pipeline of every replica.
"""

from __future__ import annotations

import logging
import re
import sys
from typing import TextIO

from pythonjsonlogger.json import JsonFormatter

# Field names whose values never reach a log line, whatever the caller passed.
_SENSITIVE_FIELDS = frozenset(
    {
        "body", "content", "text", "token", "access_token", "refresh_token", "assertion",
        "client_assertion", "client_secret", "secret", "password", "authorization", "connection_string",
    }
)
# Bearer tokens and JWT-shaped strings inside free text.
_JWT = re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")
_BEARER = re.compile(r"(?i)bearer\s+[A-Za-z0-9._~+/=-]{8,}")
_ACCOUNT_KEY = re.compile(r"(?i)(AccountKey|SharedAccessSignature|sig)=[^;&\s]+")
REDACTED = "[redacted]"


def redact_text(text: str) -> str:
    text = _JWT.sub(REDACTED, text)
    text = _BEARER.sub("Bearer " + REDACTED, text)
    return _ACCOUNT_KEY.sub(lambda m: f"{m.group(1)}={REDACTED}", text)


class RedactingFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        for name in _SENSITIVE_FIELDS.intersection(record.__dict__):
            setattr(record, name, REDACTED)
        if isinstance(record.msg, str):
            record.msg = redact_text(record.msg)
        if record.args:
            record.args = tuple(redact_text(a) if isinstance(a, str) else a for a in record.args) if isinstance(
                record.args, tuple
            ) else record.args
        return True


def configure_logging(level: str = "INFO", *, replica_id: str | None = None, stream: TextIO | None = None) -> None:
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

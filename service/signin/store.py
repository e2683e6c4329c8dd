"""The sign-in record in the shared container, sealed, read with its ETag and written by compare-and-swap.

Every read classifies (the ledger's rule): ABSENT (nobody signed in), PRESENT, or UNRESOLVED with a
reason a person can act on: the store failed, the value came without an ETag, it is sealed under
another key (``ENTRABOT_DELEGATED_TOKEN_KEY`` differs between the writer and this replica), or it does
not open or parse. Only the sign-in command creates the record; replicas rewrite it with If-Match.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from service.ledger.records.reads import CorruptValueError, ReadOutcome
from service.signin.record import SIGN_IN_KEY, SignInRecord, parse_record, render_record
from service.signin.sealing import SealError, SealingKey, SealProblem
from service.storage.backend import MemoryBackend
from service.storage.errors import StorageError


class Unreadable(str, Enum):
    STORE_FAILED = "store_failed"
    NO_ETAG = "no_etag"
    WRONG_KEY = "wrong_key"
    CORRUPT = "corrupt"


@dataclass(frozen=True)
class StoredSignIn:
    outcome: ReadOutcome
    record: SignInRecord | None = None
    etag: str | None = None  # also for a value that does not open: a new sign-in may replace it
    unreadable: Unreadable | None = None
    detail: str = ""  # why it is unreadable, without any of its content


class SignInStore:
    def __init__(
        self, backend: MemoryBackend, key: SealingKey, *, record_key: str = SIGN_IN_KEY
    ) -> None:
        self._backend = backend
        self._key = key
        self.record_key = record_key

    @property
    def key_id(self) -> str:
        """The sealing key's fingerprint (never the key)."""
        return self._key.key_id

    async def read(self) -> StoredSignIn:
        try:
            content, etag = await self._backend.read_text_with_etag(self.record_key)
        except StorageError as exc:
            return StoredSignIn(
                ReadOutcome.UNRESOLVED,
                unreadable=Unreadable.STORE_FAILED,
                detail=f"{type(exc).__name__} reading {self.record_key}",
            )
        if content is None:
            return StoredSignIn(ReadOutcome.ABSENT)
        if etag is None:
            return StoredSignIn(
                ReadOutcome.UNRESOLVED,
                unreadable=Unreadable.NO_ETAG,
                detail=f"{self.record_key} came back without an ETag",
            )
        try:
            record = parse_record(self._key.open(content, bound_to=self.record_key).decode())
        except SealError as exc:
            kind = (
                Unreadable.WRONG_KEY if exc.problem is SealProblem.WRONG_KEY else Unreadable.CORRUPT
            )
            return StoredSignIn(
                ReadOutcome.UNRESOLVED,
                etag=etag,
                unreadable=kind,
                detail=f"{self.record_key}: {exc}",
            )
        except (CorruptValueError, UnicodeDecodeError) as exc:
            return StoredSignIn(
                ReadOutcome.UNRESOLVED,
                etag=etag,
                unreadable=Unreadable.CORRUPT,
                detail=f"{self.record_key}: {exc}",
            )
        return StoredSignIn(ReadOutcome.PRESENT, record=record, etag=etag)

    async def write(self, record: SignInRecord, *, etag: str | None) -> str:
        """Create the record (``etag`` None: only where there is none) or replace the one read with
        ``etag``; ConcurrencyError when another writer came first, StorageError when the store failed."""
        sealed = self._key.seal(render_record(record).encode(), bound_to=self.record_key)
        if etag is None:
            return await self._backend.write_text(self.record_key, sealed, if_absent=True)
        return await self._backend.write_text(self.record_key, sealed, if_match=etag)

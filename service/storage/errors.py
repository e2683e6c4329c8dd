"""The errors every MemoryBackend raises, whatever it stores into.

Callers branch on these types, never on SDK exceptions, so the ledger's fail-closed rules read the
same for a local directory and an Azure Blob container.
"""

from __future__ import annotations


class StorageError(Exception):
    """Base class for every storage failure."""


class ConcurrencyError(StorageError):
    """A conditional write lost: the ETag moved (If-Match) or the key already exists (if_absent)."""


class NotAppendableError(StorageError):
    """An append to a key stored as something that cannot be appended to (on Blob: a block blob).

    Not transient: every append to that key fails the same way until it is recreated appendable.
    """


class TokenExpiredError(StorageError):
    """The store answered 401: the credential must be refreshed before retrying."""


class BackendMisconfiguredError(StorageError):
    """The configuration names no usable backend; the message says which setting to fix."""


class TransientStorageError(StorageError):
    """A timeout, a reset connection or a 5xx.

    For a write the outcome is unknown: it may have committed before the response was lost, or a
    timed-out request may still commit later. Callers that must know settle by reading back.
    """


class BackendUnavailableError(StorageError):
    """The store cannot be reached at all (connection refused, unknown host, missing container)."""

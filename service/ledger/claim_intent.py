"""What a claim tells the delivery layer around its write: the intent before, the landing after.

The ledger knows exactly which messages a claim write will win and under which claim id only once it
has decided on a fresh read; an acknowledging host's delivery record must hold them under that id
*before* the write is sent, so that a replica dying right after the write leaves them owed to the host
(service.delivery.claim_intents). The ledger calls these two hooks and knows nothing else of delivery.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

M_contra = TypeVar("M_contra", contravariant=True)


class ClaimIntent(Protocol[M_contra]):
    async def before_write(self, claim_id: str, won: Sequence[M_contra]) -> bool:
        """Record that ``won`` is about to be claimed as ``claim_id``; False: do not write the claim."""

    async def after_write(self, claim_id: str, landed: bool) -> None:
        """The write's settled outcome (never called while it is unknown)."""

"""State with compare-and-swap rules, shared by every replica through one MemoryBackend.

Each module holds one ledger: a pure core (parse, render, merge, decide) over frozen dataclasses,
and a thin async shell that reads with ETags and writes conditionally. Outcomes are enums; every
ambiguity fails closed (claims nothing) without losing what a later cycle can still claim.

The subpackages, bottom first (each imports only those above it in this list):

* ``records`` — reading with ETags (``reads``), idempotent compare-and-swap updates (``cas``), and
  the JSON field rules every record shares (``fields``).
* ``claims`` — Teams chat cursors and ``claim_delivery`` (``chat_cursor`` / ``chat_claims``), the
  email cursor and the claim → settle → hold protocol (``email_cursor`` / ``email_claims``), and
  ``settle``: settling a claim write whose outcome is unknown (shared by both, and by the summary).
* ``fleet`` — the fleet's coordination: leases, readers, poll turns, the Graph back-off, hints.
* ``memory`` — the agent's memory: interactions, promises, sent messages, permission requests,
  watched chats, chat members.
* ``summary`` — the daily summary, built from the memory and produced once per fleet and day.
"""

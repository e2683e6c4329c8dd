"""State with compare-and-swap rules, shared by every replica through one MemoryBackend.

Each module holds one ledger: a pure core (parse, render, merge, decide) over frozen dataclasses,
and a thin async shell that reads with ETags and writes conditionally. Outcomes are enums; every
ambiguity fails closed (claims nothing) without losing what a later cycle can still claim.

* ``chat_cursor`` / ``chat_claims`` — Teams chat cursors and ``claim_delivery``.
* ``email_cursor`` / ``email_claims`` — the email cursor and the claim → settle → hold protocol.
* ``settle`` — settling a claim write whose outcome is unknown (shared by both).
* ``watched_chats``, ``promises``, ``interactions``, ``daily_summary`` / ``summary_production``.
"""

from service.ledger.chat_claims import (
    ChatClaim,
    ChatClaimOutcome,
    ChatLedger,
    ClaimProblem,
    CursorRead,
    bootstrap_cursor,
    claim_delivery,
    resolve_cursor,
)
from service.ledger.chat_cursor import Candidate, ChatCursor, cursor_key
from service.clock import Clock, utc_now
from service.ledger.daily_summary import (
    Summary,
    build_summary,
    day_window,
    render_html,
    summary_due,
)
from service.ledger.email_claims import EmailClaimer, EmailCycle, EmailCycleOutcome, EmailState
from service.ledger.email_cursor import EMAIL_CURSOR_KEY, EmailCursor, MailLike
from service.ledger.interactions import Direction, Interaction, InteractionLog, InteractionQuery
from service.ledger.local_poll_state import note_ignored_local_poll_state
from service.ledger.promises import Promise, PromiseLedger, PromiseStatus, PromiseWriteOutcome
from service.ledger.reads import ReadOutcome
from service.ledger.settle import Settlement, decide_settle
from service.ledger.summary_production import DailySummaryProducer, SummaryOutcome
from service.ledger.watched_chats import WatchedChats, WatchOutcome

__all__ = [
    "Candidate",
    "ChatClaim",
    "ChatClaimOutcome",
    "ChatCursor",
    "ChatLedger",
    "ClaimProblem",
    "Clock",
    "CursorRead",
    "DailySummaryProducer",
    "Direction",
    "EMAIL_CURSOR_KEY",
    "EmailClaimer",
    "EmailCursor",
    "EmailCycle",
    "EmailCycleOutcome",
    "EmailState",
    "Interaction",
    "InteractionLog",
    "InteractionQuery",
    "MailLike",
    "Promise",
    "PromiseLedger",
    "PromiseStatus",
    "PromiseWriteOutcome",
    "ReadOutcome",
    "Settlement",
    "Summary",
    "SummaryOutcome",
    "WatchOutcome",
    "WatchedChats",
    "bootstrap_cursor",
    "build_summary",
    "claim_delivery",
    "cursor_key",
    "day_window",
    "decide_settle",
    "note_ignored_local_poll_state",
    "render_html",
    "resolve_cursor",
    "summary_due",
    "utc_now",
]

"""The order chat messages happened in, as both the chat poll and the read tools present them."""

from __future__ import annotations

from collections.abc import Sequence

from service.graph.models import ChatMessage


def oldest_first(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """By creation time; ties (same millisecond) by id, which Graph assigns in order within a chat."""
    return sorted(messages, key=lambda m: (m.created_date_time, _id_order(m.id)))


def _id_order(message_id: str) -> tuple[int, str]:
    return (int(message_id), message_id) if message_id.isdigit() else (0, message_id)

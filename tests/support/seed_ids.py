"""The ids of a seed's chats as the tests use them: build_seed and the demo seed name every chat, so a
test may take them as given (``SeedChat.id`` is optional only for a hand-written seed, whose chats the
emulator names)."""

from __future__ import annotations

from emulator import Seed


def seeded_chat_id(seed: Seed, n: int) -> str:
    chat_id = seed.chats[n].id
    assert chat_id is not None, f"chat {n} of the seed has no id"
    return chat_id

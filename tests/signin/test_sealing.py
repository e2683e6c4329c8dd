"""The seal on the sign-in record: it opens only with its key, at its own blob key, unaltered; a key
setting that is not 32 bytes of base64 is refused with what it must be, never echoing it."""

from __future__ import annotations

import base64
import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st
from settings_env import settings_from_env

from emulator.seed import build_seed
from service.devstack.emulator_env import delegated_env
from service.from_settings.signin import check_delegated_settings
from service.graph.errors import TokenConfigurationError
from service.signin.sealing import KEY_BYTES, SealError, SealingKey, SealProblem, decode_key

KEY = SealingKey(os.urandom(KEY_BYTES))
BLOB = "auth/signed_in.json"


@given(st.binary(max_size=4096))
def test_a_sealed_value_opens_with_its_key_at_its_blob_key(plaintext: bytes) -> None:
    assert KEY.open(KEY.seal(plaintext, bound_to=BLOB), bound_to=BLOB) == plaintext


def test_the_envelope_names_the_key_by_fingerprint_and_carries_no_plaintext() -> None:
    envelope = KEY.seal(b'{"refresh_token": "0.secret-refresh"}', bound_to=BLOB)
    assert "secret-refresh" not in envelope and "refresh_token" not in envelope
    assert json.loads(envelope)["key_id"] == KEY.key_id
    assert len(KEY.key_id) == 16 and KEY.key_id in repr(KEY)


def test_another_key_is_told_apart_from_a_corrupt_value() -> None:
    other = SealingKey(os.urandom(KEY_BYTES))
    with pytest.raises(SealError) as caught:
        other.open(KEY.seal(b"x", bound_to=BLOB), bound_to=BLOB)
    assert caught.value.problem is SealProblem.WRONG_KEY


def test_a_value_moved_to_another_blob_key_does_not_open() -> None:
    with pytest.raises(SealError) as caught:
        KEY.open(KEY.seal(b"x", bound_to=BLOB), bound_to="auth/other.json")
    assert caught.value.problem is SealProblem.CORRUPT


@pytest.mark.parametrize("tamper", ["flip", "truncate", "not-json", "other-format"])
def test_an_altered_envelope_is_corrupt(tamper: str) -> None:
    envelope = json.loads(KEY.seal(b"the record", bound_to=BLOB))
    sealed = bytearray(base64.b64decode(envelope["sealed"]))
    if tamper == "flip":
        sealed[0] ^= 1
        envelope["sealed"] = base64.b64encode(bytes(sealed)).decode()
    elif tamper == "truncate":
        envelope["sealed"] = base64.b64encode(bytes(sealed[:-1])).decode()
    elif tamper == "other-format":
        envelope["format"] = "plain"
    text = "{not json" if tamper == "not-json" else json.dumps(envelope)
    with pytest.raises(SealError) as caught:
        KEY.open(text, bound_to=BLOB)
    assert caught.value.problem is SealProblem.CORRUPT


def test_a_key_setting_decodes_from_standard_or_url_safe_base64() -> None:
    raw = bytes(range(250, 256)) + os.urandom(KEY_BYTES - 6)
    assert decode_key(base64.b64encode(raw).decode()) == raw
    assert decode_key(base64.urlsafe_b64encode(raw).decode().rstrip("=")) == raw


@pytest.mark.parametrize(
    "text", ["too-short", "!!!!not base64!!!!", base64.b64encode(b"x" * 16).decode()]
)
def test_a_key_setting_that_is_not_32_bytes_of_base64_says_what_it_must_be(text: str) -> None:
    with pytest.raises(ValueError) as caught:
        decode_key(text)
    assert "openssl rand -base64 32" in str(caught.value) and text not in str(caught.value)


@pytest.mark.parametrize(
    "text", ["not-a-key-but-a-secret-value", base64.b64encode(b"x" * 16).decode()]
)
def test_delegated_mode_refuses_a_key_setting_that_is_not_a_key_naming_it_not_showing_it(
    text: str,
) -> None:
    env = delegated_env(build_seed(chats=1), base_url="http://127.0.0.1:1", token_key=text)
    settings = settings_from_env({**env, "ENTRABOT_KEEP_MEMORY_LOCAL": "true"})
    with pytest.raises(TokenConfigurationError) as caught:
        check_delegated_settings(settings)
    message = str(caught.value)
    assert message.startswith("ENTRABOT_DELEGATED_TOKEN_KEY ") and "\n" not in message
    assert "openssl rand -base64 32" in message and text not in message

"""Dead letters built from any record (no broker): always a valid DeadLetter that keeps the bytes."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import DeadLetter
from schemas.codec import decode, encode
from streams.consumer import consumer_config
from streams.deadletter import MAX_ERROR_CHARS, dead_letter_for, raw_bytes


@settings(max_examples=100, deadline=None)
@given(
    key=st.none() | st.binary(max_size=64),
    value=st.none() | st.binary(max_size=512),
    error=st.text(max_size=5000),
    partition=st.integers(0, 10_000),
    offset=st.integers(0, 2**62),
)
def test_any_record_becomes_a_valid_dead_letter(key, value, error, partition, offset) -> None:  # type: ignore[no-untyped-def]
    letter = dead_letter_for(
        source_topic="ebbtide.gpu-samples",
        partition=partition,
        offset=offset,
        key=key,
        value=value,
        error=error,
        consumer="state",
        now=datetime(2026, 11, 30, tzinfo=UTC),
    )
    assert decode(DeadLetter, encode(letter)) == letter
    assert raw_bytes(letter) == (value or b"")
    assert letter.key_b64 == (None if key is None else base64.b64encode(key).decode())
    assert 1 <= len(letter.error) <= MAX_ERROR_CHARS
    assert letter.key == "ebbtide.gpu-samples"


def test_consumer_settings_for_tests_and_the_loop() -> None:
    conf = consumer_config("127.0.0.1:9092", "g", {"isolation.level": "read_uncommitted"})
    assert conf["session.timeout.ms"] == 6000 and conf["heartbeat.interval.ms"] == 500
    assert conf["auto.offset.reset"] == "earliest" and conf["enable.auto.commit"] is False
    assert conf["isolation.level"] == "read_uncommitted"  # overrides win
    assert consumer_config("127.0.0.1:9092", "g")["isolation.level"] == "read_committed"

"""Properties of the codec (no broker): valid events round-trip; any bytes decode or raise DecodeError.

A consumer turns DecodeError into a dead letter, so "never another exception" is what keeps the
loop alive on bad data.
"""

from __future__ import annotations

import pytest
from event_strategies import STRATEGIES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.base import Event
from schemas.codec import DecodeError, decode, encode
from schemas.topics import CATALOGUE

EVENT_TYPES = list(STRATEGIES)
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_strategies_cover_the_catalogue() -> None:
    assert {t.event for t in CATALOGUE} == set(STRATEGIES)


@pytest.mark.parametrize("event_type", EVENT_TYPES, ids=lambda t: t.__name__)
@PROPERTY
@given(data=st.data())
def test_any_valid_event_round_trips(event_type: type[Event], data: st.DataObject) -> None:
    event = data.draw(STRATEGIES[event_type])
    raw = encode(event)
    decoded = decode(event_type, raw)
    assert decoded == event
    assert encode(decoded) == raw
    assert decoded.key == event.key  # type: ignore[attr-defined]


@st.composite
def mutated(draw: st.DrawFn, raw: bytes) -> bytes:
    """Flip, delete, insert, duplicate or truncate bytes of a valid record, one to four times."""
    data = bytearray(raw)
    for _ in range(draw(st.integers(1, 4))):
        if not data:
            data.extend(draw(st.binary(min_size=1, max_size=8)))
            continue
        at = draw(st.integers(0, len(data) - 1))
        action = draw(st.sampled_from(["flip", "set", "delete", "insert", "duplicate", "truncate"]))
        if action == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif action == "set":
            data[at] = draw(st.sampled_from(b'{}[]",:0-.eE9 \\nutfa\x00\xff'))
        elif action == "delete":
            del data[at : at + draw(st.integers(1, 8))]
        elif action == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif action == "duplicate":
            data[at:at] = data[at : at + draw(st.integers(1, 16))]
        else:
            del data[at:]
    return bytes(data)


def _decode_or_decode_error(event_type: type[Event], raw: bytes) -> None:
    try:
        event = decode(event_type, raw)
    except DecodeError as exc:
        assert str(exc).startswith(f"{event_type.__name__}: ")
        return
    assert isinstance(event, event_type)  # a mutation that kept it valid: it must be a whole event


@pytest.mark.parametrize("event_type", EVENT_TYPES, ids=lambda t: t.__name__)
@PROPERTY
@given(data=st.data())
def test_mutated_bytes_decode_or_raise_decode_error(event_type: type[Event], data: st.DataObject) -> None:
    raw = encode(data.draw(STRATEGIES[event_type]))
    _decode_or_decode_error(event_type, data.draw(mutated(raw)))


@settings(max_examples=150, deadline=None)
@given(raw=st.binary(max_size=256), event_type=st.sampled_from(EVENT_TYPES))
def test_arbitrary_bytes_decode_or_raise_decode_error(raw: bytes, event_type: type[Event]) -> None:
    _decode_or_decode_error(event_type, raw)


def test_deeply_nested_json_is_a_decode_error() -> None:
    for event_type in EVENT_TYPES:
        _decode_or_decode_error(event_type, b"[" * 100_000)
        _decode_or_decode_error(event_type, b'{"cluster": ' + b"[" * 5000 + b"]" * 5000 + b"}")

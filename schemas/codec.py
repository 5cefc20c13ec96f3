"""Bytes <-> events. JSON on the wire, validated on the way in, nothing of Python's on the wire.

``decode`` raises :class:`DecodeError` with a message naming the offending field; the stream
layer turns that into a dead letter. Pure: no Kafka here.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import ValidationError

from schemas.base import Event

E = TypeVar("E", bound=Event)


class DecodeError(ValueError):
    """A record that is not a valid event of the expected type."""


def encode(event: Event) -> bytes:
    return event.model_dump_json(exclude_none=False).encode("utf-8")


def describe(error: ValidationError) -> str:
    """One line per problem, each naming the field path."""
    parts = []
    for item in error.errors(include_url=False):
        loc = ".".join(str(p) for p in item["loc"]) or "<record>"
        parts.append(f"{loc}: {item['msg']}")
    return "; ".join(parts)


def decode(event_type: type[E], raw: bytes | None) -> E:
    if raw is None:
        raise DecodeError("<record>: empty value (tombstone) where an event was expected")
    try:
        return event_type.model_validate_json(raw)
    except ValidationError as exc:
        raise DecodeError(f"{event_type.__name__}: {describe(exc)}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise DecodeError(f"{event_type.__name__}: <record>: {exc}") from None

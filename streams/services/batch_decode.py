"""Decoding consumed records for the stream services: records in, strict events or reasons out.

Place in the loop: the first thing :class:`streams.services.runtime.ServiceRuntime` does with a
consumed batch (and of the in-memory bus, :mod:`streams.memory_bus`). :class:`BatchDecoder`
validates each record against its topic's event type with the schema's own validator;
:func:`dead_letter` turns a record that does not decode into a DeadLetter. A record is anything
shaped like confluent-kafka's ``Message`` (:class:`Record`).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Protocol

from pydantic import ValidationError

from schemas import DeadLetter
from schemas.base import Event
from schemas.codec import DecodeError, decode
from schemas.topics import Topic


class Record(Protocol):
    """A consumed record, as confluent-kafka's ``Message`` presents one."""

    def topic(self) -> str | None: ...

    def partition(self) -> int | None: ...

    def offset(self) -> int | None: ...

    def key(self) -> bytes | None: ...

    def value(self) -> bytes | None: ...


def dead_letter(msg: Record, reason: str, consumer_name: str) -> DeadLetter:
    key = msg.key()
    return DeadLetter(
        source_topic=msg.topic() or "unknown",
        partition=max(msg.partition() or 0, 0),
        offset=max(msg.offset() or 0, 0),
        key_b64=base64.b64encode(key).decode() if key is not None else None,
        raw_b64=base64.b64encode(msg.value() or b"").decode(),
        error=reason[:4000] or "unreadable record",
        consumer=consumer_name,
        time=datetime.now(UTC),
    )


class BatchDecoder:
    """Decode a batch of one topic's records: the event's validator over the batch, per record on error.

    Each record is validated on its own bytes (no joining of records into one document, so two
    malformed records can never pass as valid ones), straight through the model's core validator
    (``model_validate_json`` minus its Python wrapper: the same strict schema). On the first
    failure the batch is decoded again record by record with :func:`schemas.codec.decode`, so
    every bad record gets its own reason and the good ones keep their order.
    """

    def __init__(self, source: Topic) -> None:
        self.source = source
        self._validate_json: Callable[[bytes], Event] = source.event.__pydantic_validator__.validate_json

    def validate_all(self, values: Sequence[bytes | None]) -> list[Event] | None:
        """Every record's event, or None as soon as one does not validate."""
        try:
            return list(map(self._validate_json, values))  # type: ignore[arg-type]
        except (ValidationError, ValueError, TypeError):
            return None

    def decode(self, values: Sequence[bytes | None]) -> list[Event | DecodeError]:
        valid = self.validate_all(values)
        if valid is not None:
            return list(valid)
        return self.decode_each(values)

    def decode_each(self, values: Sequence[bytes | None]) -> list[Event | DecodeError]:
        out: list[Event | DecodeError] = []
        for raw in values:
            try:
                out.append(decode(self.source.event, raw))
            except DecodeError as exc:
                out.append(exc)
        return out

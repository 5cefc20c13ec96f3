"""Dead letters: a record no consumer could read, kept whole (base64) with the reason.

``dead_letter_for`` is pure (record coordinates + bytes + error -> :class:`schemas.DeadLetter`);
``DeadLetterWriter`` sends it to the dead-letter topic and waits for the acknowledgement, so the
consumer only commits past a bad record once its copy is safe.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime

from schemas.deadletter import DeadLetter
from schemas.topics import DEAD_LETTERS, Topic
from streams.producer import EventProducer

MAX_ERROR_CHARS = 4000


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def dead_letter_for(
    *,
    source_topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    error: str,
    consumer: str,
    now: datetime | None = None,
) -> DeadLetter:
    reason = (error or "unknown error")[:MAX_ERROR_CHARS]
    return DeadLetter(
        source_topic=source_topic,
        partition=partition,
        offset=offset,
        key_b64=_b64(key),
        raw_b64=_b64(value) or "",
        error=reason,
        consumer=consumer,
        time=now or datetime.now(UTC),
    )


def raw_bytes(letter: DeadLetter) -> bytes:
    """The original record value back from a dead letter."""
    return base64.b64decode(letter.raw_b64)


class DeadLetterWriter:
    """Sends dead letters synchronously (one flush each: bad records are rare)."""

    def __init__(self, producer: EventProducer, topic: Topic = DEAD_LETTERS) -> None:
        self.producer = producer
        self.topic = topic
        self.written = 0

    def write(self, letter: DeadLetter, timeout_s: float = 30.0) -> None:
        self.producer.send(self.topic, letter)
        self.producer.flush(timeout_s)
        self.written += 1

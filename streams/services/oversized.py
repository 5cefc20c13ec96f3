"""Outputs too large to write: a dead letter that says so, and the loop goes on.

Used by the runtime's produce step (streams/services/runtime.py). Two refusals are the same fact,
a record its topic cannot hold: the producer's own check (``produce`` raises KafkaException
MSG_SIZE_TOO_LARGE when the uncompressed value is over ``message.max.bytes``) and the broker's
(the delivery report says MSG_SIZE_TOO_LARGE when the compressed batch is over the topic's
``max.message.bytes``). Retrying cannot help, and replaying the inputs would give the same record
again, so the record is dropped, logged, and a DeadLetter names the topic, the key, the size and
the limits; the inputs are committed as usual. The letter carries no bytes of the record (it
would be refused too).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from confluent_kafka import KafkaError

from schemas.deadletter import DeadLetter
from schemas.topics import BY_NAME
from streams.deadletter import dead_letter_for

log = logging.getLogger(__name__)


def is_too_large(error: KafkaError | None) -> bool:
    return error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE


def _topic_limit(topic_name: str, prefix: str) -> str:
    topic = BY_NAME.get(topic_name.removeprefix(prefix))
    return f"; the catalogue sets {topic.max_message_bytes:,} bytes compressed" if topic is not None else ""


def oversized_letter(
    *,
    topic_name: str,
    prefix: str,
    key: bytes | None,
    value_bytes: int,
    producer_limit: int,
    event_name: str,
    error: KafkaError,
    consumer: str,
    by_broker: bool,
) -> DeadLetter:
    """The dead letter for one output that its topic cannot take (logged as an error too)."""
    who = (
        f"the broker refused it (over the topic's max.message.bytes{_topic_limit(topic_name, prefix)})"
        if by_broker
        else f"the producer refused it (message.max.bytes {producer_limit:,} bytes uncompressed)"
    )
    reason = (
        f"output not written: {event_name} of {value_bytes:,} bytes for {topic_name} is too large; "
        f"{who}: {error.str()}. The record is dropped and the loop goes on"
    )
    log.error("%s: %s", consumer, reason)
    return dead_letter_for(
        source_topic=topic_name,
        partition=0,
        offset=0,
        key=key,
        value=None,
        error=reason,
        consumer=consumer,
        now=datetime.now(UTC),
    )

"""ValidatingConsumer: records of catalogue topics in, decoded and validated events out.

``poll`` yields :class:`Received` (event plus topic, partition, offset, key). A record that
``schemas.codec.decode`` rejects (bad bytes, invalid event, tombstone, non-UTF-8 key) becomes a
:class:`schemas.DeadLetter` on the dead-letter topic, its offset is committed, and polling goes
on: bad data never raises out of the loop. Offsets are committed explicitly after processing
(``commit``), reads are ``read_committed``, so aborted transactions stay invisible.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from schemas.base import Event
from schemas.codec import DecodeError, decode
from schemas.topics import DEAD_LETTERS, Topic
from streams.deadletter import DeadLetterWriter, dead_letter_for
from streams.kafka_client import Brokers, client_config
from streams.producer import EventProducer

log = logging.getLogger(__name__)

SESSION_TIMEOUT_MS = 6000
HEARTBEAT_INTERVAL_MS = 500


@dataclass(frozen=True)
class Received:
    topic: Topic
    partition: int
    offset: int
    key: str | None
    event: Event
    timestamp_ms: int | None


def consumer_config(
    bootstrap: Brokers, group_id: str, overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "group.id": group_id,
        "session.timeout.ms": SESSION_TIMEOUT_MS,
        "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
    }
    conf = client_config(bootstrap, conf)
    conf.update(overrides or {})
    return conf


def _coordinates(message: Message) -> tuple[str, int, int]:
    """(topic, partition, offset) of a fetched record (always set on records without an error)."""
    topic, partition, offset = message.topic(), message.partition(), message.offset()
    if topic is None or partition is None or offset is None:
        raise KafkaException(KafkaError(KafkaError._BAD_MSG, "record without topic, partition or offset"))
    return topic, partition, offset


class ValidatingConsumer:
    def __init__(
        self,
        bootstrap: Brokers,
        group_id: str,
        topics: Sequence[Topic],
        *,
        dead_letters: Topic = DEAD_LETTERS,
        dead_letter_producer: EventProducer | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        if not topics:
            raise ValueError("topics: subscribe to at least one catalogue topic")
        self.group_id = group_id
        self._topics = {t.name: t for t in topics}
        self._consumer = Consumer(consumer_config(bootstrap, group_id, config))
        self._owns_dlq_producer = dead_letter_producer is None
        producer = dead_letter_producer or EventProducer(bootstrap, client_id=f"{group_id}-dead-letters")
        self._dead_letters = DeadLetterWriter(producer, dead_letters)
        self._consumer.subscribe(list(self._topics))
        self.broker_errors = 0

    @property
    def dead_lettered(self) -> int:
        return self._dead_letters.written

    def poll(self, timeout_s: float = 1.0, max_records: int = 500) -> Iterator[Received]:
        """Yield valid events until ``max_records`` or ``timeout_s`` passes with no more records.

        Stops early (returning what it has) once records have been yielded and the next poll
        finds nothing. Breaking out of the loop loses nothing: the position only moves past
        records already yielded or dead-lettered.
        """
        deadline = time.monotonic() + timeout_s
        seen = 0
        while seen < max_records:
            remaining = deadline - time.monotonic()
            if remaining <= 0 and seen:
                return
            message = self._consumer.poll(max(remaining, 0.0) if not seen else 0.05)
            if message is None:
                if seen or time.monotonic() >= deadline:
                    return
                continue
            error = message.error()
            if error is not None:
                self._on_broker_error(error)
                continue
            seen += 1
            received = self._decode(message)
            if received is not None:
                yield received

    def _decode(self, message: Message) -> Received | None:
        source, partition, offset = _coordinates(message)
        topic = self._topics[source]
        raw_key = message.key()
        try:
            key = raw_key.decode("utf-8") if raw_key is not None else None
        except UnicodeDecodeError as exc:
            self._dead_letter(message, f"<key>: not UTF-8 ({exc})")
            return None
        try:
            event = decode(topic.event, message.value())
        except DecodeError as exc:
            self._dead_letter(message, str(exc))
            return None
        timestamp_type, timestamp_ms = message.timestamp()
        return Received(
            topic=topic,
            partition=partition,
            offset=offset,
            key=key,
            event=event,
            timestamp_ms=timestamp_ms if timestamp_type else None,
        )

    def _dead_letter(self, message: Message, error: str) -> None:
        source, partition, offset = _coordinates(message)
        if source == self._dead_letters.topic.name:
            log.error(
                "unreadable record on the dead-letter topic itself (%s[%d]@%d): %s; skipped",
                source,
                partition,
                offset,
                error,
            )
        else:
            letter = dead_letter_for(
                source_topic=source,
                partition=partition,
                offset=offset,
                key=message.key(),
                value=message.value(),
                error=error,
                consumer=self.group_id,
            )
            self._dead_letters.write(letter)
            log.warning("dead-lettered %s[%d]@%d: %s", source, partition, offset, error)
        self._commit_offsets([TopicPartition(source, partition, offset + 1)])

    def _on_broker_error(self, error: KafkaError) -> None:
        if error.fatal():
            raise KafkaException(error)
        self.broker_errors += 1
        log.warning("consumer %s: broker reports %s", self.group_id, error.str())

    def _commit_offsets(self, offsets: list[TopicPartition]) -> None:
        self._consumer.commit(offsets=offsets, asynchronous=False)

    def commit(self, through: Received | None = None) -> None:
        """Commit through ``through`` (inclusive), or the position after everything polled so far."""
        if through is not None:
            self._commit_offsets([TopicPartition(through.topic.name, through.partition, through.offset + 1)])
            return
        offsets = self.positions()
        if offsets:
            self._commit_offsets(offsets)

    def positions(self) -> list[TopicPartition]:
        """The next offset to read of every assigned partition that has one (for transactions)."""
        assigned = self._consumer.assignment()
        if not assigned:
            return []
        return [tp for tp in self._consumer.position(assigned) if tp.offset >= 0]

    def committed_offsets(self, timeout_s: float = 10.0) -> dict[tuple[str, int], int]:
        """The group's committed offset of every partition of the subscribed topics (-1001: none)."""
        partitions: list[TopicPartition] = []
        for name in self._topics:
            metadata = self._consumer.list_topics(name, timeout=timeout_s)
            partitions.extend(TopicPartition(name, p) for p in metadata.topics[name].partitions)
        return {
            (tp.topic, tp.partition): tp.offset
            for tp in self._consumer.committed(partitions, timeout=timeout_s)
        }

    def group_metadata(self) -> object:
        return self._consumer.consumer_group_metadata()

    def assignment(self) -> list[TopicPartition]:
        return list(self._consumer.assignment())

    def close(self) -> None:
        self._consumer.close()
        if self._owns_dlq_producer:
            self._dead_letters.producer.close()

"""EventProducer: events of the catalogue onto their topics, encoded by ``schemas.codec``.

Idempotent, ``acks=all``, zstd and the catalogue's record size limit (``PRODUCER_LIMITS``).
``send`` checks the event belongs on the topic and keys it by the
event's ``.key`` unless told otherwise. With a ``transactional_id`` it offers begin / commit /
abort and ``send_offsets_to_transaction`` for read-process-write steps (Apache Kafka; Tansu's
transactions are not real, see the broker handle's ``transactions`` flag).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer, TopicPartition

from schemas.base import Event
from schemas.codec import encode
from schemas.topics import PRODUCER_LIMITS, Topic
from streams.kafka_client import Brokers, client_config

log = logging.getLogger(__name__)

EVENT_HEADER = "ebbtide-event"


class DeliveryError(RuntimeError):
    """Records the broker did not acknowledge; the message lists them (topic, key, error)."""


@dataclass(frozen=True)
class Delivered:
    """A record the broker acknowledged."""

    topic: str
    partition: int
    offset: int
    key: str | None


DeliveryCallback = Callable[[Delivered | None, KafkaError | None], None]


class EventProducer:
    def __init__(
        self,
        bootstrap: Brokers,
        *,
        transactional_id: str | None = None,
        client_id: str = "ebbtide",
        config: Mapping[str, Any] | None = None,
        init_timeout_s: float = 30.0,
    ) -> None:
        conf: dict[str, Any] = client_config(
            bootstrap,
            {
                "client.id": client_id,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 30_000,
                **PRODUCER_LIMITS,
            },
        )
        if transactional_id is not None:
            conf["transactional.id"] = transactional_id
            conf["transaction.timeout.ms"] = 60_000
        conf.update(config or {})
        self._producer = Producer(conf)
        self.transactional = transactional_id is not None
        self._failures: list[str] = []
        self.delivered_count = 0
        if self.transactional:
            self._producer.init_transactions(init_timeout_s)

    def send(
        self,
        topic: Topic,
        event: Event,
        key: str | None = None,
        *,
        on_delivery: DeliveryCallback | None = None,
    ) -> None:
        """Queue one event (asynchronous); ``flush`` waits and raises if any were not acknowledged."""
        if not isinstance(event, topic.event):
            raise TypeError(f"topic {topic.name} carries {topic.event.__name__}, not {type(event).__name__}")
        record_key = key if key is not None else getattr(event, "key", None)
        if not isinstance(record_key, str):
            raise TypeError(f"{type(event).__name__}: no .key property, so send() needs key=")
        value = encode(event)
        callback = self._callback(record_key, on_delivery)
        while True:
            try:
                self._producer.produce(
                    topic.name,
                    value=value,
                    key=record_key.encode("utf-8"),
                    headers=[(EVENT_HEADER, type(event).__name__.encode("ascii"))],
                    on_delivery=callback,
                )
                break
            except BufferError:
                self._producer.poll(0.1)  # local queue full: let deliveries drain
        self._producer.poll(0)

    def send_raw(self, topic_name: str, value: bytes | None, key: bytes | None = None) -> None:
        """Bytes as they are, no validation: for tests that feed bad records and for replays."""
        self._producer.produce(topic_name, value=value, key=key, on_delivery=self._callback(None, None))
        self._producer.poll(0)

    def _callback(
        self, key: str | None, user: DeliveryCallback | None
    ) -> Callable[[KafkaError | None, Message], None]:
        def delivered(error: KafkaError | None, message: Message) -> None:
            if error is not None:
                self._failures.append(f"{message.topic()} key={key!r}: {error.str()}")
                if user is not None:
                    user(None, error)
                return
            self.delivered_count += 1
            if user is not None:
                done = Delivered(message.topic() or "", message.partition() or 0, message.offset() or 0, key)
                user(done, None)

        return delivered

    def flush(self, timeout_s: float = 30.0) -> None:
        """Wait for every queued record; raise :class:`DeliveryError` naming those that failed."""
        remaining = self._producer.flush(timeout_s)
        failures, self._failures = self._failures, []
        if remaining:
            failures.append(f"{remaining} record(s) still queued after {timeout_s} s")
        if failures:
            raise DeliveryError("not acknowledged: " + "; ".join(failures[:20]))

    # --- transactions (Apache Kafka) ---

    def _require_transactional(self) -> None:
        if not self.transactional:
            raise RuntimeError("transactional_id: this producer was created without one")

    def begin(self) -> None:
        self._require_transactional()
        self._producer.begin_transaction()

    def commit(self, timeout_s: float = 30.0) -> None:
        self._require_transactional()
        self._producer.commit_transaction(timeout_s)
        failures, self._failures = self._failures, []
        if failures:
            raise DeliveryError("committed, but: " + "; ".join(failures[:20]))

    def abort(self, timeout_s: float = 30.0) -> None:
        self._require_transactional()
        self._producer.abort_transaction(timeout_s)
        self._failures.clear()

    def send_offsets_to_transaction(
        self, offsets: list[TopicPartition], group_metadata: object, timeout_s: float = 30.0
    ) -> None:
        """Commit a consumer's positions atomically with this transaction's records."""
        self._require_transactional()
        self._producer.send_offsets_to_transaction(offsets, group_metadata, timeout_s)

    def close(self, timeout_s: float = 10.0) -> None:
        try:
            self._producer.flush(timeout_s)
        except KafkaException as exc:  # closing never raises: the loop is shutting down anyway
            log.warning("producer flush on close failed: %s", exc)

"""The one consume-process-produce loop every stream service runs (the only Kafka code they share).

A service is a :class:`Processor`: it names its input topics and turns each decoded event into
outgoing events (and may emit more on a timer). :class:`ServiceRuntime` does the rest:

1. ``consume(num_messages=batch)``; decode each record against its topic's event type (the hot
   topic in one TypeAdapter call over the whole batch, falling back to one by one on an error);
2. a record that does not decode becomes a DeadLetter (raw bytes, key, reason) and the loop goes on;
3. hand events to the processor, then ``on_idle`` for timers;
4. commit. Commit order: outputs are produced first, then input offsets are committed, so a crash
   in between replays inputs (at-least-once) and never loses one. With ``transactional`` (Apache
   Kafka) outputs and offsets commit atomically in one transaction. While the processor says
   ``pending()`` (it holds an input it has not answered yet) no offset is committed.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from pydantic import TypeAdapter, ValidationError

from schemas import DeadLetter
from schemas.base import Event
from schemas.codec import DecodeError, decode, describe, encode
from schemas.topics import DEAD_LETTERS, Topic
from streams.services.observe import ServiceMetrics

log = logging.getLogger(__name__)

Outgoing = tuple[Topic, Event]


class Processor(Protocol):
    name: str
    inputs: tuple[Topic, ...]

    def on_event(self, source: Topic, event: Event) -> Iterable[Outgoing]: ...

    def on_idle(self) -> Iterable[Outgoing]: ...

    def pending(self) -> bool: ...


@dataclass
class RuntimeStats:
    consumed: int = 0
    dead_lettered: int = 0
    produced: int = 0
    commits: int = 0
    batches: int = 0
    last_error: str | None = None
    positions: dict[tuple[str, int], int] = field(default_factory=dict)


def dead_letter(msg: Message, reason: str, consumer_name: str) -> DeadLetter:
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
    """Decode a batch of one topic's records: one validation call for all, per record on error."""

    def __init__(self, source: Topic) -> None:
        self.source = source
        self._adapter: TypeAdapter[list[Any]] = TypeAdapter(list[source.event])  # type: ignore[name-defined]

    def decode(self, values: Sequence[bytes | None]) -> list[Event | DecodeError]:
        if values and all(v for v in values):
            try:
                return list(self._adapter.validate_json(b"[" + b",".join(values) + b"]"))  # type: ignore[arg-type]
            except (ValidationError, ValueError):
                pass
        out: list[Event | DecodeError] = []
        for raw in values:
            try:
                out.append(decode(self.source.event, raw))
            except DecodeError as exc:
                out.append(exc)
        return out


def kafka_config(bootstrap: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, **extra}


@dataclass
class ServiceRuntime:
    processor: Processor
    bootstrap: str
    group_id: str
    batch_size: int = 5000
    poll_timeout_s: float = 0.2
    session_timeout_ms: int = 6000
    heartbeat_interval_ms: int = 500
    transactional: bool = False
    transactional_id: str | None = None
    topic_prefix: str = ""
    on_batch: Callable[[RuntimeStats], None] | None = None
    observe: ServiceMetrics | None = None
    stats: RuntimeStats = field(default_factory=RuntimeStats)

    def __post_init__(self) -> None:
        self._decoders = {self.topic_prefix + t.name: BatchDecoder(t) for t in self.processor.inputs}
        self._consumer = Consumer(
            kafka_config(
                self.bootstrap,
                **{
                    "group.id": self.group_id,
                    "enable.auto.commit": False,
                    "auto.offset.reset": "earliest",
                    "session.timeout.ms": self.session_timeout_ms,
                    "heartbeat.interval.ms": self.heartbeat_interval_ms,
                    "isolation.level": "read_committed",
                    "partition.assignment.strategy": "cooperative-sticky",
                    "error_cb": self._on_client_error,
                    # Large fetches keep the hot telemetry topic fed in big batches.
                    "max.partition.fetch.bytes": 8 * 1024 * 1024,
                    "fetch.max.bytes": 64 * 1024 * 1024,
                    "queued.min.messages": 200_000,
                    # A decision is one hop per service: do not let an idle fetch sit for 500 ms.
                    "fetch.wait.max.ms": 50,
                },
            )
        )
        self._broker_lost = False
        self._producer = self._new_producer()
        self._in_transaction = False
        self._offsets_sent = False
        self._consumer.subscribe(list(self._decoders))
        if self.observe is not None:
            self.observe.declare(self._decoders)
        self._uncommitted = False

    def _on_client_error(self, error: KafkaError) -> None:
        if error.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT):
            self._broker_lost = True

    def _new_producer(self) -> Producer:
        conf = kafka_config(
            self.bootstrap, **{"enable.idempotence": True, "linger.ms": 5, "error_cb": self._on_client_error}
        )
        if self.transactional:
            conf["transactional.id"] = self.transactional_id or f"{self.group_id}-{uuid.uuid4().hex[:8]}"
        producer = Producer(conf)
        if self.transactional:
            producer.init_transactions(60)
        return producer

    def _renew_producer_after_outage(self) -> None:
        """After the broker was lost, start the next transaction on a fresh producer.

        librdkafka's transactional producer can block in send_offsets_to_transaction after its
        coordinator went away and came back; a new producer with the same transactional.id
        re-initialises (fencing the old epoch and aborting whatever it left open).
        """
        if not (self.transactional and self._broker_lost and not self._in_transaction):
            return
        log.warning("%s: broker was lost; renewing the transactional producer", self.processor.name)
        self._broker_lost = False
        self._producer.flush(5)
        self._producer = self._new_producer()

    # ---- producing -------------------------------------------------------------------------

    def _produce(self, out: Iterable[Outgoing]) -> None:
        for dest, event in out:
            if self.transactional and not self._in_transaction:
                self._renew_producer_after_outage()
                self._producer.begin_transaction()
                self._in_transaction = True
            if self.observe is not None:
                self.observe.output(event)
            key = getattr(event, "key", None)
            self._producer.produce(
                self.topic_prefix + dest.name, value=encode(event), key=key.encode() if key else None
            )
            self.stats.produced += 1
            self._producer.poll(0)

    def _commit(self) -> None:
        """Commit outputs and input offsets; a broker that is away makes this retry, never crash.

        Transactional: a retriable error keeps the transaction open and the next poll tries the
        same step again (the offsets are sent once per transaction); an error that requires an
        abort aborts it and rewinds the consumer to the last committed offsets, so the inputs are
        processed again (the decisions are deterministic, so the replay produces the same plans).
        """
        if self.processor.pending():
            return
        try:
            if self.transactional:
                if not self._commit_transaction():
                    return
            else:
                if not self._uncommitted:
                    return
                if self._producer.flush(30):
                    log.warning("%s: outputs not yet acknowledged; will retry", self.processor.name)
                    return
                try:
                    self._consumer.commit(asynchronous=False)
                except KafkaException as exc:
                    if exc.args[0].code() != KafkaError._NO_OFFSET:
                        raise
        except KafkaException as exc:
            error = exc.args[0]
            self.stats.last_error = str(error)
            if self.transactional and error.txn_requires_abort():
                log.warning("%s: transaction aborted (%s); replaying inputs", self.processor.name, error)
                self._abort_and_rewind()
                return
            if error.retriable() or error.code() in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT):
                log.warning("%s: commit will be retried (%s)", self.processor.name, error)
                time.sleep(0.5)
                return
            raise
        self._uncommitted = False
        self.stats.commits += 1

    def _commit_transaction(self) -> bool:
        if not self._uncommitted and not self._in_transaction:
            return False
        if not self._in_transaction:
            self._renew_producer_after_outage()
            self._producer.begin_transaction()
            self._in_transaction = True
        if not self._offsets_sent:
            offsets = self._consumer.position(self._consumer.assignment())
            self._producer.send_offsets_to_transaction(
                [o for o in offsets if o.offset >= 0], self._consumer.consumer_group_metadata(), 30
            )
            self._offsets_sent = True
        self._producer.commit_transaction(30)
        self._in_transaction = False
        self._offsets_sent = False
        return True

    def _abort_and_rewind(self) -> None:
        try:
            self._producer.abort_transaction(30)
        except KafkaException as exc:
            log.warning("%s: abort failed (%s)", self.processor.name, exc)
            return
        self._in_transaction = False
        self._offsets_sent = False
        assignment = self._consumer.assignment()
        for committed in self._consumer.committed(assignment, timeout=30):
            if committed.offset >= 0:
                self._consumer.seek(committed)
            else:
                self._consumer.seek(TopicPartition(committed.topic, committed.partition, OFFSET_BEGINNING))

    def _dead_letter(self, msg: Message, reason: str) -> None:
        self._produce([(DEAD_LETTERS, dead_letter(msg, reason, self.processor.name))])
        self.stats.dead_lettered += 1

    # ---- the loop --------------------------------------------------------------------------

    def poll_once(self) -> int:
        messages = self._consumer.consume(num_messages=self.batch_size, timeout=self.poll_timeout_s)
        by_topic: dict[str, list[Message]] = {}
        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    self.stats.last_error = str(err)
                    log.warning("%s: consume error %s", self.processor.name, err)
                continue
            by_topic.setdefault(msg.topic() or "", []).append(msg)
        # Keep the order of topics as they first appear in the batch (arrival order within a topic).
        for name, batch in by_topic.items():
            decoder = self._decoders.get(name)
            if decoder is None:
                continue
            results = decoder.decode([m.value() for m in batch])
            if self.observe is not None:
                self.observe.inputs([r for r in results if not isinstance(r, DecodeError)])
            source = decoder.source
            on_event = self.processor.on_event
            for msg, result in zip(batch, results, strict=True):
                if isinstance(result, DecodeError):
                    self._dead_letter(msg, str(result))
                    continue
                try:
                    out = on_event(source, result)
                    if out:
                        self._produce(out)
                except (ValueError, ValidationError) as exc:  # the event is valid but unusable here
                    reason = describe(exc) if isinstance(exc, ValidationError) else str(exc)
                    self._dead_letter(msg, f"{source.event.__name__}: {reason}")
            positions = self.stats.positions
            for msg in batch:  # read up to here (the demo and the benchmarks wait on it)
                positions[(name, msg.partition() or 0)] = (msg.offset() or 0) + 1
        self.stats.consumed += len(messages)
        if messages:
            self._uncommitted = True
        self._produce(self.processor.on_idle())
        self._commit()
        self.stats.batches += 1
        if self.observe is not None:
            self.observe.step(ok=True)
            if self.stats.batches % 50 == 0:
                self.observe.lag(self._consumer)
        if self.on_batch is not None:
            self.on_batch(self.stats)
        return len(messages)

    def run(self, stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                self.poll_once()
        finally:
            self.close()

    def close(self) -> None:
        """Leave the group; an open transaction is aborted (its inputs are replayed by the next owner)."""
        try:
            if self._in_transaction:
                self._producer.abort_transaction(10)
            self._producer.flush(10)
        except KafkaException as exc:
            log.warning("%s: closing with an unfinished transaction (%s)", self.processor.name, exc)
        finally:
            self._consumer.close()
            # Drop the producer now (librdkafka destroys it with the last reference), so it does
            # not outlive the broker and log reconnection attempts.
            del self._producer


def _watermarks(consumer: Consumer, partition: TopicPartition, timeout_s: float = 15.0) -> tuple[int, int]:
    """(low, high) of a partition, retrying while a new topic's leader is still being elected.

    When no answer comes in time, (0, 0): the caller then reads it until idle like any other.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            low, high = consumer.get_watermark_offsets(partition, timeout=5)
            return int(low), int(high)
        except KafkaException as exc:
            if not exc.args[0].retriable() or time.monotonic() > deadline:
                log.warning("watermarks of %s[%d]: %s", partition.topic, partition.partition, exc)
                return 0, 0
            time.sleep(0.2)


def read_topic_to_end(
    bootstrap: str, source: Topic, idle_s: float = 1.0, max_s: float = 30.0, prefix: str = ""
) -> list[Event]:
    """Every readable event of a topic, from the start (used to restore state at start-up).

    Reads at least up to each partition's high watermark as first reported, then until nothing
    arrives for ``idle_s`` (Tansu under-reports the high watermark, so the idle wait catches the
    rest). An empty topic returns at once. Records that do not decode are skipped here; the live
    consumer dead-letters them.
    """
    consumer = Consumer(
        kafka_config(
            bootstrap,
            **{
                "group.id": f"restore-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            },
        )
    )
    try:
        name = prefix + source.name
        metadata = consumer.list_topics(name, timeout=10)
        partitions = metadata.topics[name].partitions if name in metadata.topics else {}
        wanted: dict[int, int] = {}
        for partition in partitions:
            low, high = _watermarks(consumer, TopicPartition(name, partition))
            if high > low:
                wanted[partition] = high
        if not wanted:
            return []  # every partition is empty (or answered nothing): nothing to restore
        consumer.assign([TopicPartition(name, p, 0) for p in partitions])
        events: list[Event] = []
        deadline = time.monotonic() + max_s
        last_seen = time.monotonic()

        def behind() -> bool:
            # position(), not the last offset delivered: it moves past transaction markers too.
            positions = consumer.position([TopicPartition(name, p) for p in wanted])
            return any(tp.offset < wanted[tp.partition] for tp in positions)

        while time.monotonic() < deadline and (behind() or time.monotonic() - last_seen < idle_s):
            for msg in consumer.consume(num_messages=1000, timeout=0.2):
                if msg.error() is not None:
                    continue
                last_seen = time.monotonic()
                try:
                    events.append(decode(source.event, msg.value()))
                except DecodeError:
                    continue
        return events
    finally:
        consumer.close()

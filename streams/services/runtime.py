"""The one consume-process-produce loop every stream service runs (the only Kafka code they share).

A service is a :class:`Processor`: it names its input topics and turns each decoded event into
outgoing events (and may emit more on a timer). :class:`ServiceRuntime` does the rest:

1. ``consume(num_messages=batch)``; decode each run of records of one topic against its event
   type (the topic's validator called straight over the run; on the first error the run is
   decoded again one record at a time, so each bad record gets its own reason);
2. a record that does not decode becomes a DeadLetter (raw bytes, key, reason) and the loop goes on;
3. hand events to the processor (a run of a topic in one ``on_events`` call where the processor
   folds it in bulk, e.g. the state service's telemetry), then ``on_idle`` for timers; steps 1-3
   for one run are :func:`streams.services.dispatch.handle_run`, which the in-memory bus
   (:mod:`streams.memory_bus`) calls too;
4. commit. Commit order: outputs are produced first, then input offsets are committed, so a crash
   in between replays inputs (at-least-once) and never loses one. Every output carries a delivery
   callback: the input offsets are committed only once the broker acknowledged every output since
   the last commit; a failed (or timed-out) delivery instead rewinds the consumer to the committed
   offsets, tells the processor (its optional ``on_rewind``, so it answers the replay again) and
   retries, counted in ``ebbtide_delivery_failures_total{service}``. With ``transactional`` (Apache
   Kafka) outputs and offsets commit atomically in one transaction (a failed output makes the
   commit abort; the same rewind follows). While the processor says ``pending()`` (it holds an
   input it has not answered yet) no offset is committed. A commit the group refuses because it
   forgot the member (a broker restarted past the session timeout) is retried, never a crash.
5. an output its topic cannot hold (the producer's or the broker's MSG_SIZE_TOO_LARGE) is no
   failed delivery to retry: it is dropped and dead-lettered with its size and the limits
   (streams/services/oversized.py), and the inputs are committed after the letter is written.
   Transactional, a broker's refusal aborts the transaction as any failed output does; the
   replay then dead-letters that topic and key's output of at least the refused size.
   Every producer compresses (zstd) and takes records up to the catalogue's MAX_RECORD_BYTES.

Each completed poll (steps 1-4, with or without records) beats the runtime's ``heartbeat`` when it
has one: the service's /healthz answers from it (streams.health).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from schemas.codec import encode
from schemas.topics import BY_NAME, DEAD_LETTERS, MAX_RECORD_BYTES, PRODUCER_LIMITS
from streams.gc_tuning import freeze_warm_objects, tune_gc_for_batches
from streams.health import Heartbeat
from streams.kafka_client import Brokers, client_config
from streams.services.batch_decode import BatchDecoder
from streams.services.dispatch import Outgoing, Processor, handle_run
from streams.services.observe import ServiceMetrics
from streams.services.oversized import is_too_large, oversized_letter
from streams.services.restore import read_topic_to_end

__all__ = [
    "BatchDecoder",
    "Outgoing",
    "Processor",
    "RuntimeStats",
    "ServiceRuntime",
    "read_topic_to_end",
]

log = logging.getLogger(__name__)

# Commit errors retried on the next poll with the same offsets (their outputs are acknowledged):
# the broker away, or the group forgot this member (a broker killed and restarted past the
# session timeout); librdkafka rejoins, and a partition lost meanwhile is replayed from its
# committed offset by whoever gets it.
_RETRY_COMMIT = (
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
    KafkaError.UNKNOWN_MEMBER_ID,
    KafkaError.ILLEGAL_GENERATION,
    KafkaError.REBALANCE_IN_PROGRESS,
)


@dataclass
class RuntimeStats:
    consumed: int = 0
    dead_lettered: int = 0
    produced: int = 0
    commits: int = 0
    batches: int = 0
    delivery_failures: int = 0
    rewinds: int = 0
    oversized: int = 0
    last_error: str | None = None
    positions: dict[tuple[str, int], int] = field(default_factory=dict)


@dataclass
class ServiceRuntime:
    processor: Processor
    bootstrap: Brokers
    group_id: str
    batch_size: int = 5000
    poll_timeout_s: float = 0.2
    session_timeout_ms: int = 6000
    heartbeat_interval_ms: int = 500
    transactional: bool = False
    transactional_id: str | None = None
    topic_prefix: str = ""
    max_poll_interval_ms: int = 300_000
    retry_backoff_s: float = 0.5
    max_record_bytes: int = MAX_RECORD_BYTES  # the producer's message.max.bytes (uncompressed)
    on_batch: Callable[[RuntimeStats], None] | None = None
    observe: ServiceMetrics | None = None
    heartbeat: Heartbeat | None = None
    # TEST HOOK, None in service: called after the outputs are acknowledged (transactional: and
    # the offsets sent) and right before the commit; the kill tests SIGKILL the process there.
    before_commit: Callable[[], None] | None = None
    stats: RuntimeStats = field(default_factory=RuntimeStats)

    def __post_init__(self) -> None:
        tune_gc_for_batches()
        self._decoders = {self.topic_prefix + t.name: BatchDecoder(t) for t in self.processor.inputs}
        self._consumer = Consumer(self._consumer_config())
        self._broker_lost = False
        self._producer = self._new_producer()
        self._in_transaction = False
        self._offsets_sent = False
        self._consumer.subscribe(list(self._decoders))
        if self.observe is not None:
            self.observe.declare(self._decoders)
        self._uncommitted = False
        self._warm = False
        # Delivery reports since the last commit, and the next offset to commit per input partition.
        self._failed_deliveries = 0
        self._to_commit: dict[tuple[str, int], int] = {}
        self._oversized: list[Outgoing] = []  # dead letters of outputs the broker refused as too large
        # Transactional: (topic, key) -> (size, error) of an output the broker refused as too large; the
        # aborted transaction's replay dead-letters an output there at least that large instead of
        # sending it again (a replayed decision is the same record, unless a time limit changed it).
        self._refused: dict[tuple[str, bytes | None], tuple[int, KafkaError]] = {}

    def _consumer_config(self) -> dict[str, Any]:
        return client_config(
            self.bootstrap,
            {
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
                # Above the decision budget: a long solve must not make the group evict the service.
                "max.poll.interval.ms": self.max_poll_interval_ms,
            },
        )

    def _on_client_error(self, error: KafkaError) -> None:
        if error.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT):
            self._broker_lost = True

    def _new_producer(self) -> Producer:
        conf = client_config(
            self.bootstrap,
            {
                "enable.idempotence": True,
                "linger.ms": 5,
                "error_cb": self._on_client_error,
                **PRODUCER_LIMITS,
                "message.max.bytes": self.max_record_bytes,
            },
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
            value, record_key = encode(event), key.encode() if key else None
            refused = self._refused.get((self.topic_prefix + dest.name, record_key))
            if refused is not None and len(value) >= refused[0]:
                self._produce([self._too_large(dest.name, record_key, value, refused[1], by_broker=True)])
                continue
            try:
                self._producer.produce(
                    self.topic_prefix + dest.name, value=value, key=record_key, on_delivery=self._on_delivery
                )
            except KafkaException as exc:
                if not is_too_large(exc.args[0]) or dest is DEAD_LETTERS:
                    raise
                self._produce([self._too_large(dest.name, record_key, value, exc.args[0], by_broker=False)])
                continue
            self.stats.produced += 1
            self._producer.poll(0)

    def _too_large(
        self, topic_name: str, key: bytes | None, value: bytes, error: KafkaError, *, by_broker: bool
    ) -> Outgoing:
        """The dead letter of an output its topic cannot hold (counted; see streams/services/oversized.py)."""
        self.stats.oversized += 1
        self.stats.last_error = str(error)
        name = topic_name.removeprefix(self.topic_prefix)
        event = BY_NAME[name].event.__name__ if name in BY_NAME else "record"
        letter = oversized_letter(
            topic_name=self.topic_prefix + name,
            prefix=self.topic_prefix,
            key=key,
            value_bytes=len(value),
            producer_limit=self.max_record_bytes,
            event_name=event,
            error=error,
            consumer=self.processor.name,
            by_broker=by_broker,
        )
        return DEAD_LETTERS, letter

    def _on_delivery(self, error: KafkaError | None, msg: Message) -> None:
        """The broker's answer for one output; a failure holds back the commit (see :meth:`_commit`)."""
        if error is None:
            return
        if is_too_large(error) and msg.topic() != self.topic_prefix + DEAD_LETTERS.name:
            value = msg.value() or b""
            if self.transactional:  # the transaction aborts; its replay dead-letters the record
                key = (msg.topic() or "", msg.key())
                smallest = min(len(value), self._refused.get(key, (len(value), error))[0])
                self._refused[key] = (smallest, error)
            else:
                letter = self._too_large(msg.topic() or "", msg.key(), value, error, by_broker=True)
                self._oversized.append(letter)
                return
        self._failed_deliveries += 1
        self.stats.delivery_failures += 1
        self.stats.last_error = str(error)
        log.warning("%s: output to %s not delivered (%s)", self.processor.name, msg.topic(), error)
        if self.observe is not None:
            self.observe.delivery_failed()

    def _commit(self) -> None:
        """Commit outputs and input offsets; a broker that is away makes this retry, never crash.

        Transactional: a retriable error keeps the transaction open and the next poll tries the
        same step again (the offsets are sent once per transaction); an error that requires an
        abort aborts it and rewinds the consumer to the last committed offsets, so the inputs are
        processed again (the decisions are deterministic, so the replay produces the same plans).
        """
        self._producer.poll(0)  # serve the delivery reports that came in
        if self._oversized:
            letters, self._oversized = self._oversized, []
            self._produce(letters)
        if not self.transactional and self._failed_deliveries:
            self._rewind_after_failed_delivery()  # also while pending: the processor must answer again
            return
        if self.processor.pending():
            return
        try:
            committed = self._commit_transaction() if self.transactional else self._commit_offsets()
            if not committed:
                return
        except KafkaException as exc:
            error = exc.args[0]
            self.stats.last_error = str(error)
            if self.transactional and error.txn_requires_abort():
                log.warning("%s: transaction aborted (%s); replaying inputs", self.processor.name, error)
                self._abort_and_rewind()
                return
            if error.retriable() or error.code() in _RETRY_COMMIT:
                log.warning("%s: commit will be retried (%s)", self.processor.name, error)
                time.sleep(0.5)
                return
            raise
        self._uncommitted = False
        self.stats.commits += 1

    def _commit_offsets(self) -> bool:
        """At-least-once: wait until the outputs are acknowledged, then commit the input offsets."""
        if not self._uncommitted:
            return False
        if self._producer.flush(30):
            log.warning("%s: outputs not yet acknowledged; will retry", self.processor.name)
            return False
        if self._failed_deliveries:
            self._rewind_after_failed_delivery()
            return False
        if self._oversized:
            return False  # their dead letters are written (next poll) before the inputs are committed
        assignment = set(self._consumer.assignment())
        offsets = [
            TopicPartition(topic, partition, offset)
            for (topic, partition), offset in self._to_commit.items()
            if TopicPartition(topic, partition) in assignment
        ]
        if self.before_commit is not None:
            self.before_commit()
        if offsets:
            try:
                self._consumer.commit(offsets=offsets, asynchronous=False)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError._NO_OFFSET:
                    raise
        self._to_commit.clear()
        return True

    def _rewind_after_failed_delivery(self) -> None:
        """Some output since the last commit was not acknowledged: replay the uncommitted inputs."""
        log.warning(
            "%s: %d output(s) not delivered; replaying the uncommitted inputs",
            self.processor.name,
            self._failed_deliveries,
        )
        self._failed_deliveries = 0
        self._rewind_to_committed()
        time.sleep(self.retry_backoff_s)

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
        if self.before_commit is not None:
            self._producer.flush(30)  # the outputs in the log, not yet committed
            self.before_commit()
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
        self._failed_deliveries = 0
        self._rewind_to_committed()

    def _rewind_to_committed(self) -> None:
        """Seek every assigned partition back to its committed offset; the processor hears of it."""
        self.stats.rewinds += 1
        self._to_commit.clear()
        assignment = self._consumer.assignment()
        for committed in self._consumer.committed(assignment, timeout=30):
            if committed.offset < 0:
                committed = TopicPartition(committed.topic, committed.partition, OFFSET_BEGINNING)
            try:
                self._consumer.seek(committed)
            except KafkaException as exc:  # not fetching yet: it starts from the committed offset anyway
                name = self.processor.name
                log.warning("%s: seek %s[%d]: %s", name, committed.topic, committed.partition, exc)
        on_rewind = getattr(self.processor, "on_rewind", None)
        if on_rewind is not None:
            on_rewind()

    # ---- the loop --------------------------------------------------------------------------

    def poll_once(self) -> int:
        messages = self._consumer.consume(num_messages=self.batch_size, timeout=self.poll_timeout_s)
        if messages:
            if any(map(Message.error, messages)):
                messages = self._without_errors(messages)
            # Runs of one topic in arrival order (a fetch delivers a partition's records together).
            for name, run in groupby(messages, key=Message.topic):
                decoder = self._decoders.get(name or "")
                if decoder is not None:
                    self._handle(decoder, list(run))
            self._note_positions()
            self._note_next_offsets(messages)
            self.stats.consumed += len(messages)
            self._uncommitted = True
        self._produce(self.processor.on_idle())
        self._commit()
        self.stats.batches += 1
        if self.heartbeat is not None:
            self.heartbeat.beat()
        if self.observe is not None:
            self.observe.step(ok=True)
            if self.stats.batches % 50 == 0:
                self.observe.lag(self._consumer)
        if messages and not self._warm:
            freeze_warm_objects()  # after the first batch that did real work
            self._warm = True
        if self.on_batch is not None:
            self.on_batch(self.stats)
        return len(messages)

    def _without_errors(self, messages: list[Message]) -> list[Message]:
        kept = []
        for msg in messages:
            err = msg.error()
            if err is None:
                kept.append(msg)
            elif err.code() != KafkaError._PARTITION_EOF:
                self.stats.last_error = str(err)
                log.warning("%s: consume error %s", self.processor.name, err)
        return kept

    def _handle(self, decoder: BatchDecoder, batch: list[Message]) -> None:
        """Decode a run of one topic's records, hand the valid events to the processor, produce the answer."""
        on_inputs = self.observe.inputs if self.observe is not None else None
        handled = handle_run(self.processor, decoder, batch, on_inputs)
        self._produce(handled.outputs)
        self.stats.dead_lettered += handled.dead_lettered

    def _note_next_offsets(self, messages: list[Message]) -> None:
        """What to commit once the outputs are acknowledged: the offset after each partition's last record."""
        nxt = self._to_commit
        nxt.update({(m.topic() or "", m.partition() or 0): (m.offset() or 0) + 1 for m in messages})

    def _note_positions(self) -> None:
        """Read up to here, per partition (the demo and the benchmarks wait on it).

        The consumer's position: the offset after the last record handed to us (or past a
        transaction marker), one call per batch instead of a look at every record.
        """
        positions = self.stats.positions
        for tp in self._consumer.position(self._consumer.assignment()):
            if tp.offset >= 0:
                positions[(tp.topic, tp.partition)] = tp.offset

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

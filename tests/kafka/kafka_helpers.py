"""Small helpers of the Kafka tests: the services' own runtime driven with a trivial processor,
raw records read back, and (for the tests of the client classes) draining a ValidatingConsumer."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, Message, Producer, TopicPartition

from schemas.base import Event
from schemas.codec import encode
from schemas.topics import Topic
from streams.consumer import Received, ValidatingConsumer
from streams.services.runtime import Outgoing, ServiceRuntime


@dataclass
class Collect:
    """A processor that keeps every event it is handed and answers with ``answer(event)``."""

    inputs: tuple[Topic, ...]
    name: str = "under-test"
    answer: Callable[[Event], Iterable[Outgoing]] = lambda _event: ()
    emit_once: list[Outgoing] = field(default_factory=list)
    got: list[Event] = field(default_factory=list)

    def on_event(self, source: Topic, event: Event) -> Iterable[Outgoing]:
        self.got.append(event)
        return self.answer(event)

    def on_idle(self) -> Iterable[Outgoing]:
        out, self.emit_once = self.emit_once, []
        return out

    def pending(self) -> bool:
        return False


def run_until(runtime: ServiceRuntime, done: Callable[[], bool], timeout_s: float = 60.0) -> None:
    """Poll the runtime until ``done()``, then a few polls more (their commits); bounded in time."""
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, (
            f"{runtime.processor.name}: not done in {timeout_s:.0f} s: {runtime.stats}"
        )
        runtime.poll_once()
    for _ in range(5):
        runtime.poll_once()


def produce(bootstrap: str, records: Iterable[tuple[str, bytes | None, bytes | None]]) -> None:
    """(topic, value, key) records, acknowledged by every replica."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    for topic, value, key in records:
        producer.produce(topic, value, key=key)
    assert producer.flush(30) == 0


def produce_events(bootstrap: str, topic: str, events: Iterable[Event]) -> None:
    produce(bootstrap, ((topic, encode(e), e.key.encode()) for e in events))


def raw_records(
    bootstrap: str,
    topic: str,
    partitions: int,
    want: int,
    committed_only: bool = True,
    timeout_s: float = 30.0,
) -> list[Message]:
    """Up to ``want`` records of ``topic`` from its start (read_uncommitted: aborted ones too)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"raw-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed" if committed_only else "read_uncommitted",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[Message] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < want and time.monotonic() < deadline:
            got.extend(m for m in consumer.consume(100, timeout=0.5) if m.error() is None)
        got.extend(m for m in consumer.consume(100, timeout=1.0) if m.error() is None)  # none more
    finally:
        consumer.close()
    return got


def drain(
    consumer: ValidatingConsumer, want: int, timeout_s: float = 60.0, quiet_s: float = 0.0
) -> list[Received]:
    """Poll until ``want`` events arrived or ``timeout_s`` passed; then keep polling ``quiet_s`` more."""
    got: list[Received] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        got.extend(consumer.poll(timeout_s=1.0))
    quiet_until = time.monotonic() + quiet_s
    while time.monotonic() < quiet_until:
        got.extend(consumer.poll(timeout_s=0.5))
    return got

"""Reading a topic back from its start: how services restore what they published before a restart.

Place in the loop: at start-up only. The state service reads its last ClusterState back from the
compacted cluster-state topic, the actuator its own results (ebbtide.wiring).
"""

from __future__ import annotations

import logging
import time
import uuid

from confluent_kafka import Consumer, KafkaException, TopicPartition

from schemas.base import Event
from schemas.codec import DecodeError, decode
from schemas.topics import Topic
from streams.kafka_client import Brokers, client_config

log = logging.getLogger(__name__)


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
    bootstrap: Brokers, source: Topic, idle_s: float = 1.0, max_s: float = 30.0, prefix: str = ""
) -> list[Event]:
    """Every readable event of a topic, from the start (used to restore state at start-up), in
    offset order within each partition.

    Reads at least up to each partition's high watermark as first reported, then until nothing
    arrives for ``idle_s`` (Tansu under-reports the high watermark, so the idle wait catches the
    rest). An empty topic returns at once. Records that do not decode are skipped here; the live
    consumer dead-letters them.
    """
    consumer = Consumer(
        client_config(
            bootstrap,
            {
                "group.id": f"restore-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                # From the first record still kept (retention may have deleted offset 0), never the end.
                "auto.offset.reset": "earliest",
            },
        )
    )
    try:
        name = prefix + source.name
        metadata = consumer.list_topics(name, timeout=10)
        partitions = metadata.topics[name].partitions if name in metadata.topics else {}
        wanted: dict[int, int] = {}
        lows: dict[int, int] = {}
        for partition in partitions:
            low, high = _watermarks(consumer, TopicPartition(name, partition))
            lows[partition] = low
            if high > low:
                wanted[partition] = high
        if not wanted:
            return []  # every partition is empty (or answered nothing): nothing to restore
        consumer.assign([TopicPartition(name, p, lows[p]) for p in partitions])
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

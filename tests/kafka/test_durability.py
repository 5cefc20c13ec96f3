"""Every acknowledged record survives a broker stop and restart on the same log directory: after a
clean stop, and again after SIGKILL (no clean shutdown; the OS page cache survives, as on a
process crash).

Runs its own, second local Apache Kafka (the session broker is left alone).
"""

from __future__ import annotations

import dataclasses
import os
import signal

import pytest
from confluent_kafka import Message, Producer
from event_samples import sample
from kafka_helpers import raw_records

from schemas import GpuSample
from schemas.codec import decode, encode
from schemas.topics import GPU_SAMPLES, Topic
from streams.broker import BrokerHandle
from streams.broker_kafka import start_local_kafka
from streams.topics_admin import ensure_topics

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

BATCH = 400


def _produce(
    broker: BrokerHandle, topic: Topic, first: int, acknowledged: dict[tuple[int, int], GpuSample]
) -> None:
    """A batch produced as the services' runtime produces (idempotent, acks=all, keyed)."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(first, first + BATCH):
        event = sample(GpuSample, gpu_index=i, gpu_uuid=f"GPU-{i % 17}")

        def remember(error: object, msg: Message, event: GpuSample = event) -> None:
            if error is None:
                acknowledged[(msg.partition(), msg.offset())] = event  # type: ignore[index]

        producer.produce(topic.name, encode(event), key=event.key.encode(), on_delivery=remember)
    assert producer.flush(30) == 0


def _read_all(broker: BrokerHandle, topic: Topic, want: int) -> dict[tuple[int, int], GpuSample]:
    records = raw_records(broker.bootstrap, topic.name, topic.partitions, want=want)
    return {(m.partition(), m.offset()): decode(GpuSample, m.value()) for m in records}  # type: ignore[misc]


def _assert_all_there(
    acknowledged: dict[tuple[int, int], GpuSample], found: dict[tuple[int, int], GpuSample]
) -> None:
    missing = set(acknowledged) - set(found)
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"
    assert all(found[k] == acknowledged[k] for k in acknowledged)
    assert len(found) == len(acknowledged)


def test_acknowledged_records_survive_clean_stop_and_kill(tmp_path) -> None:
    data_dir = tmp_path / "broker"
    topic = dataclasses.replace(GPU_SAMPLES, name="durability.gpu-samples", partitions=3)
    acknowledged: dict[tuple[int, int], GpuSample] = {}

    broker = start_local_kafka("durability", data_dir=data_dir, die_with_parent=True)
    try:
        ensure_topics(broker.bootstrap, [topic])
        _produce(broker, topic, 0, acknowledged)
        assert len(acknowledged) == BATCH
        first_bootstrap = broker.bootstrap
    finally:
        broker.stop()  # SIGTERM: a clean, controlled shutdown

    broker = start_local_kafka("durability", data_dir=data_dir, die_with_parent=True)
    try:
        assert broker.bootstrap == first_bootstrap  # the same port, so clients need no new address
        _assert_all_there(acknowledged, _read_all(broker, topic, BATCH))
        _produce(broker, topic, BATCH, acknowledged)
        assert len(acknowledged) == 2 * BATCH
    finally:
        assert broker.pid is not None
        os.killpg(broker.pid, signal.SIGKILL)  # no shutdown at all: recovery must find the records
        broker.stop()

    broker = start_local_kafka("durability", data_dir=data_dir, die_with_parent=True)
    try:
        _assert_all_there(acknowledged, _read_all(broker, topic, 2 * BATCH))
    finally:
        broker.stop()

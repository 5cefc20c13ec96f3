"""Transactions on Apache Kafka: aborted records stay invisible to read_committed consumers, and a
read-process-write step commits its output and its input offsets together (or neither)."""

from __future__ import annotations

import dataclasses

import pytest
from event_samples import sample
from kafka_helpers import drain

from schemas import DemandSample
from schemas.topics import DEMAND_SAMPLES
from streams.consumer import ValidatingConsumer
from streams.producer import EventProducer

pytestmark = pytest.mark.kafka


def _demand(i: int) -> DemandSample:
    return sample(DemandSample, service=f"svc-{i}", requests_per_s=float(i))  # type: ignore[return-value]


def test_aborted_transaction_is_invisible_to_read_committed(kafka_broker, kafka_topics, group_id) -> None:
    assert kafka_broker.transactions
    (demand,) = kafka_topics(dataclasses.replace(DEMAND_SAMPLES, partitions=1))
    producer = EventProducer(kafka_broker.bootstrap, transactional_id=group_id("tx"))
    producer.begin()
    for i in range(3):
        producer.send(demand, _demand(i))
    producer.flush()  # the aborted records really reach the log
    producer.abort()
    producer.begin()
    for i in range(3, 5):
        producer.send(demand, _demand(i))
    producer.commit()

    committed_reader = ValidatingConsumer(kafka_broker.bootstrap, group_id("committed"), [demand])
    uncommitted_reader = ValidatingConsumer(
        kafka_broker.bootstrap,
        group_id("uncommitted"),
        [demand],
        config={"isolation.level": "read_uncommitted"},
    )
    try:
        committed = drain(committed_reader, want=2, quiet_s=1.0)
        uncommitted = drain(uncommitted_reader, want=5, quiet_s=0.5)
    finally:
        committed_reader.close()
        uncommitted_reader.close()
    assert [r.event.service for r in committed] == ["svc-3", "svc-4"]
    # control: the aborted records are in the log, only hidden from read_committed
    assert [r.event.service for r in uncommitted] == [f"svc-{i}" for i in range(5)]


def _process_step(bootstrap: str, group: str, source, sink, tx_id: str, *, commit: bool) -> int:  # type: ignore[no-untyped-def]
    """Read every source record, write a copy to sink, send offsets; commit or abort. Returns records read."""
    consumer = ValidatingConsumer(bootstrap, group, [source])
    producer = EventProducer(bootstrap, transactional_id=tx_id)
    try:
        records = drain(consumer, want=4, quiet_s=0.5)
        producer.begin()
        for record in records:
            producer.send(sink, record.event)
        producer.send_offsets_to_transaction(consumer.positions(), consumer.group_metadata())
        if commit:
            producer.commit()
        else:
            producer.abort()
    finally:
        consumer.close()
    return len(records)


def test_read_process_write_commits_output_and_offsets_together(kafka_broker, kafka_topics, group_id) -> None:
    (source,) = kafka_topics(dataclasses.replace(DEMAND_SAMPLES, partitions=1))
    sink = dataclasses.replace(source, name=source.name + "-out")
    from streams.topics_admin import ensure_topics

    ensure_topics(kafka_broker.bootstrap, [sink])
    producer = EventProducer(kafka_broker.bootstrap)
    for i in range(4):
        producer.send(source, _demand(i))
    producer.flush()
    group = group_id("processor")

    # an aborted step: no output visible, offsets not committed, so the next run re-reads all four
    assert _process_step(kafka_broker.bootstrap, group, source, sink, group_id("tx"), commit=False) == 4
    assert _process_step(kafka_broker.bootstrap, group, source, sink, group_id("tx"), commit=True) == 4

    reader = ValidatingConsumer(kafka_broker.bootstrap, group_id("reader"), [sink])
    try:
        output = drain(reader, want=4, quiet_s=1.0)
    finally:
        reader.close()
    assert [r.event for r in output] == [_demand(i) for i in range(4)]

    after = ValidatingConsumer(kafka_broker.bootstrap, group, [source])
    try:
        assert after.committed_offsets() == {(source.name, 0): 4}
    finally:
        after.close()

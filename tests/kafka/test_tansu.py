"""The embedded Tansu broker (the demo's): topics and the validating consumer work; its handle
does not claim transactions it does not have."""

from __future__ import annotations

import dataclasses

import pytest
from event_samples import sample
from kafka_helpers import drain

from schemas import DemandSample
from schemas.topics import CATALOGUE, DEAD_LETTERS, DEMAND_SAMPLES
from streams.consumer import ValidatingConsumer
from streams.producer import EventProducer
from streams.topics_admin import ensure_topics, partition_counts, prefixed

pytestmark = pytest.mark.kafka


def test_tansu_serves_the_catalogue_and_dead_letters(tansu_broker, topic_prefix) -> None:
    assert tansu_broker.kind == "tansu" and not tansu_broker.transactions
    topics = [prefixed(t, topic_prefix) for t in CATALOGUE]
    outcomes = ensure_topics(tansu_broker.bootstrap, topics, tolerate_config_errors=True)
    assert set(outcomes) == {t.name for t in topics}
    assert (
        ensure_topics(tansu_broker.bootstrap, topics, tolerate_config_errors=True).keys() == outcomes.keys()
    )
    assert partition_counts(tansu_broker.bootstrap, [t.name for t in topics]) == {
        t.name: t.partitions for t in topics
    }

    demand = next(t for t in topics if t.name.endswith(DEMAND_SAMPLES.name))
    demand = dataclasses.replace(demand)
    dead_letters = next(t for t in topics if t.name.endswith(DEAD_LETTERS.name))
    producer = EventProducer(tansu_broker.bootstrap)
    events = [sample(DemandSample, service="chat", requests_per_s=float(i)) for i in range(5)]
    for i, event in enumerate(events):
        producer.send(demand, event)
        if i == 2:
            producer.send_raw(demand.name, b"not an event", b"chat")
    producer.flush()
    consumer = ValidatingConsumer(
        tansu_broker.bootstrap, f"{topic_prefix}tansu", [demand], dead_letters=dead_letters
    )
    try:
        received = drain(consumer, want=len(events), quiet_s=0.5)
    finally:
        consumer.close()
    assert [r.event for r in received] == events  # one key: one partition, order kept
    assert consumer.dead_lettered == 1

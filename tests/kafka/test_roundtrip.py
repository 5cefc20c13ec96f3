"""Every event of the catalogue goes through the real broker and comes back equal, keyed and placed."""

from __future__ import annotations

import pytest
from event_samples import BUILDERS, sample
from kafka_helpers import drain

from schemas.topics import CATALOGUE, DEAD_LETTERS
from streams.consumer import ValidatingConsumer
from streams.producer import EventProducer

pytestmark = pytest.mark.kafka


def test_every_catalogue_event_covered_by_a_sample() -> None:
    assert {t.event for t in CATALOGUE} == set(BUILDERS)


def test_every_event_type_round_trips(kafka_broker, kafka_topics, group_id) -> None:
    topics = kafka_topics(*CATALOGUE)
    by_event = {t.event: t for t in topics}
    dead_letters = next(t for t in topics if t.event is DEAD_LETTERS.event)
    sent = {event_type: sample(event_type) for event_type in BUILDERS}
    producer = EventProducer(kafka_broker.bootstrap)
    for event_type, event in sent.items():
        producer.send(by_event[event_type], event)
    producer.flush()
    assert producer.delivered_count == len(sent)

    consumer = ValidatingConsumer(
        kafka_broker.bootstrap, group_id("roundtrip"), topics, dead_letters=dead_letters
    )
    try:
        received = drain(consumer, want=len(sent))
        consumer.commit()
    finally:
        consumer.close()

    assert len(received) == len(sent), [r.topic.name for r in received]
    for record in received:
        original = sent[record.topic.event]
        assert type(record.event) is record.topic.event
        assert record.event == original
        assert record.key == original.key
        assert record.offset == 0
    assert consumer.dead_lettered == 0


def test_explicit_key_overrides_and_wrong_topic_is_refused(kafka_broker, kafka_topics, group_id) -> None:
    from schemas import DemandSample, GpuSample
    from schemas.topics import DEMAND_SAMPLES, GPU_SAMPLES

    demand, gpus = kafka_topics(DEMAND_SAMPLES, GPU_SAMPLES)
    producer = EventProducer(kafka_broker.bootstrap)
    with pytest.raises(TypeError, match="carries GpuSample"):
        producer.send(gpus, sample(DemandSample))
    producer.send(demand, sample(DemandSample), key="override")
    producer.flush()
    consumer = ValidatingConsumer(kafka_broker.bootstrap, group_id("keys"), [demand])
    try:
        (record,) = drain(consumer, want=1)
    finally:
        consumer.close()
    assert record.key == "override"
    assert isinstance(record.event, DemandSample)
    assert not isinstance(record.event, GpuSample)

"""Every event of the catalogue goes through the real broker and comes back equal, keyed and placed,
written and read by the services' own runtime. (The second test is of the client classes in
streams.producer / streams.consumer, which no service uses.)"""

from __future__ import annotations

import pytest
from event_samples import BUILDERS, sample
from kafka_helpers import Collect, drain, raw_records, run_until

from schemas.topics import CATALOGUE
from streams.consumer import ValidatingConsumer
from streams.producer import EventProducer
from streams.services.runtime import ServiceRuntime

pytestmark = pytest.mark.kafka


def test_every_catalogue_event_covered_by_a_sample() -> None:
    assert {t.event for t in CATALOGUE} == set(BUILDERS)


def test_every_event_type_round_trips(kafka_broker, kafka_topics, topic_prefix, group_id) -> None:
    """A service's runtime publishes one event of each type and, subscribed to every topic, reads
    them back equal; each record sits on its topic under the event's key."""
    topics = kafka_topics(*CATALOGUE)
    sent = {event_type: sample(event_type) for event_type in BUILDERS}
    by_event = {t.event: t for t in CATALOGUE}
    reader = Collect(inputs=CATALOGUE, name="round-trip")
    reader.emit_once = [(by_event[type(e)], e) for e in sent.values()]
    consumer = ServiceRuntime(
        reader, kafka_broker.bootstrap, group_id("round-trip"), topic_prefix=topic_prefix
    )
    try:
        run_until(consumer, lambda: len(reader.got) >= len(sent))
    finally:
        consumer.close()
    assert len(reader.got) == len(sent) and {type(e): e for e in reader.got} == sent
    assert consumer.stats.dead_lettered == 0
    for topic in topics:  # keyed and placed: on its topic, under its key
        (record,) = raw_records(kafka_broker.bootstrap, topic.name, topic.partitions, want=1)
        event = sent[topic.event]
        assert record.key() == event.key.encode() and record.offset() == 0


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

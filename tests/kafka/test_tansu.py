"""The embedded Tansu broker (the demo's): topics and the services' runtime (reading, dead-lettering)
work; its handle does not claim transactions it does not have."""

from __future__ import annotations

import pytest
from event_samples import sample
from kafka_helpers import Collect, produce, run_until

from schemas import DemandSample
from schemas.codec import encode
from schemas.topics import CATALOGUE, DEMAND_SAMPLES
from streams.services.runtime import ServiceRuntime
from streams.topics_admin import ensure_topics, partition_counts, prefixed

pytestmark = pytest.mark.kafka


def test_tansu_serves_the_catalogue_and_dead_letters(tansu_broker, topic_prefix) -> None:
    assert tansu_broker.kind == "tansu" and not tansu_broker.transactions
    topics = [prefixed(t, topic_prefix) for t in CATALOGUE]
    topics_by = {t.name.removeprefix(topic_prefix): t.name for t in topics}
    outcomes = ensure_topics(tansu_broker.bootstrap, topics, tolerate_config_errors=True)
    assert set(outcomes) == {t.name for t in topics}
    assert (
        ensure_topics(tansu_broker.bootstrap, topics, tolerate_config_errors=True).keys() == outcomes.keys()
    )
    assert partition_counts(tansu_broker.bootstrap, [t.name for t in topics]) == {
        t.name: t.partitions for t in topics
    }

    events = [sample(DemandSample, service="chat", requests_per_s=float(i)) for i in range(5)]
    records = [(topics_by[DEMAND_SAMPLES.name], encode(e), e.key.encode()) for e in events]
    records.insert(3, (topics_by[DEMAND_SAMPLES.name], b"not an event", b"chat"))
    produce(tansu_broker.bootstrap, records)
    service = Collect(inputs=(DEMAND_SAMPLES,), name="tansu-reader")
    runtime = ServiceRuntime(
        service, tansu_broker.bootstrap, f"{topic_prefix}tansu", topic_prefix=topic_prefix
    )
    try:
        run_until(runtime, lambda: len(service.got) >= len(events) and runtime.stats.dead_lettered >= 1)
    finally:
        runtime.close()
    assert service.got == events  # one key: one partition, order kept
    assert runtime.stats.dead_lettered == 1

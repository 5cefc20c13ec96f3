"""Delivery before commit, on the real broker through the services' own runtime (marker ``kafka``).

A service's outputs are refused by the broker (their topic's ``max.message.bytes`` set below the
record's size): its input offsets stay uncommitted, the runtime rewinds and retries (counted in
``ebbtide_delivery_failures_total``), and once the topic takes the records again the outputs
arrive and only then are the inputs committed. Nothing is lost on the way.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
from loop_factories import cluster, job
from loop_harness import new_loop, wait_for

from ebbtide.wiring import Parts, build_runtime
from forecaster.source import SeasonalNaiveSource
from schemas import ClusterState, DemandForecast, JobStatus
from schemas.codec import encode
from schemas.topics import CLUSTER_STATE, FORECASTS, JOB_EVENTS
from streams.services.runtime import ServiceRuntime, read_topic_to_end
from streams.topics_admin import admin_client, ensure_catalogue

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]


def _max_message_bytes(bootstrap: str, topic: str, value: int) -> None:
    entry = ConfigEntry("max.message.bytes", str(value), incremental_operation=AlterConfigOpType.SET)
    change = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
    admin = admin_client(bootstrap)  # held until the answer comes
    admin.incremental_alter_configs([change])[change].result(30)


def _committed(runtime: ServiceRuntime, topic: str) -> int:
    """The group's committed offsets of ``topic``, summed over its partitions (none yet: 0)."""
    committed = runtime._consumer.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)
    return sum(max(int(tp.offset), 0) for tp in committed)


def _end(runtime: ServiceRuntime, topic: str) -> int:
    """The high watermarks of ``topic``, summed: what a commit of every input reaches."""
    return sum(
        runtime._consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(3)
    )


def _poll_until(runtime: ServiceRuntime, predicate, what: str, timeout_s: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    def step() -> bool:
        runtime.poll_once()
        return bool(predicate())

    wait_for(step, timeout_s=timeout_s, what=what)


def _refuse_then_accept(bootstrap: str, runtime: ServiceRuntime, input_topic: str, output_topic: str) -> None:
    """Outputs refused: failures counted, rewinds, no commit; then accepted: committed past the input."""
    _poll_until(runtime, lambda: runtime.stats.delivery_failures >= 2, "two refused deliveries")
    assert runtime.stats.rewinds >= 2, "a failed delivery must rewind to the committed inputs"
    end = _end(runtime, input_topic)
    assert end > 0
    assert _committed(runtime, input_topic) == 0, "inputs committed although their outputs were refused"
    _max_message_bytes(bootstrap, output_topic, 1_048_588)
    _poll_until(runtime, lambda: _committed(runtime, input_topic) == end, "the inputs to be committed")


def test_forecaster_commits_a_state_only_after_its_forecasts_are_delivered(kafka_broker, topic_prefix):
    first = cluster(0, history=[2.0, 3.0, 4.0])
    loop = new_loop(kafka_broker.bootstrap, topic_prefix, first, transactions=False)
    ensure_catalogue(kafka_broker.bootstrap, topic_prefix)
    forecasts_topic, states_topic = topic_prefix + FORECASTS.name, topic_prefix + CLUSTER_STATE.name
    _max_message_bytes(kafka_broker.bootstrap, forecasts_topic, 128)
    parts = Parts(clock=loop.clock, seed=loop.seed, forecast_source=SeasonalNaiveSource(horizon_steps=8))
    runtime = build_runtime("forecaster", loop.settings, parts, metrics=loop.metrics)
    try:
        _produce(kafka_broker.bootstrap, states_topic, first)
        _refuse_then_accept(kafka_broker.bootstrap, runtime, states_topic, forecasts_topic)
    finally:
        runtime.close()
    delivered = read_topic_to_end(kafka_broker.bootstrap, FORECASTS, idle_s=0.5, prefix=topic_prefix)
    assert [f.service for f in delivered if isinstance(f, DemandForecast) and f.issued_at == first.as_of]
    failures = loop.metrics.delivery_failures.labels("forecaster")._value.get()
    assert failures == runtime.stats.delivery_failures >= 2


def test_state_republishes_a_refused_snapshot_and_commits_its_events_after(kafka_broker, topic_prefix):
    first = cluster(0, jobs=[job("j1", JobStatus.QUEUED, 0)], history=[2.0, 3.0])
    loop = new_loop(kafka_broker.bootstrap, topic_prefix, first, transactions=False)
    ensure_catalogue(kafka_broker.bootstrap, topic_prefix)
    states_topic, events_topic = topic_prefix + CLUSTER_STATE.name, topic_prefix + JOB_EVENTS.name
    _max_message_bytes(kafka_broker.bootstrap, states_topic, 128)
    runtime = build_runtime(
        "state", loop.settings, Parts(clock=loop.clock, seed=loop.seed), metrics=loop.metrics
    )
    try:
        loop.feed(None, first)
        _poll_until(runtime, lambda: "j1" in runtime.processor.fold.jobs, "the job to be folded")
        _refuse_then_accept(kafka_broker.bootstrap, runtime, events_topic, states_topic)
    finally:
        runtime.close()
    snapshots = read_topic_to_end(kafka_broker.bootstrap, CLUSTER_STATE, idle_s=0.5, prefix=topic_prefix)
    assert any(isinstance(s, ClusterState) and "j1" in {j.spec.job_id for j in s.jobs} for s in snapshots)


def _produce(bootstrap: str, topic: str, event: ClusterState) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    producer.produce(topic, encode(event), key=event.key.encode())
    assert producer.flush(30) == 0

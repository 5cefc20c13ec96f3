"""Delivery before commit, on the real broker through the services' own runtime (marker ``kafka``).

A service's outputs are refused by the broker (their topic's ``message.timestamp.before.max.ms``
set to 0, so a record is too old on arrival unless it arrives within the millisecond it was
stamped): its input offsets stay uncommitted, the runtime rewinds and retries (counted in
``ebbtide_delivery_failures_total``), and once the topic takes the records again the outputs arrive
and only then are the inputs committed. Nothing is lost on the way.

An output its topic can never hold is different (issue 19): refused as too large by the broker
(the topic's ``max.message.bytes``) or by the producer itself (``message.max.bytes``, the optimizer
in a transaction), it is dead-lettered with its size and the limit, the inputs are committed and
the service goes on; retrying would only give the same record again.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
from loop_factories import cluster, job
from loop_harness import new_loop, wait_for

from ebbtide.wiring import Parts, build_processor, build_runtime, group_id_for
from forecaster.source import SeasonalNaiveSource
from schemas import ClusterState, DeadLetter, DemandForecast, JobStatus
from schemas.codec import encode
from schemas.topics import ALLOCATIONS, CLUSTER_STATE, DEAD_LETTERS, FORECASTS, JOB_EVENTS, PLANS
from streams.services.runtime import ServiceRuntime, read_topic_to_end
from streams.topics_admin import admin_client, ensure_catalogue

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]


def _set_topic_config(bootstrap: str, topic: str, name: str, value: int) -> None:
    """Set one topic config and return once the broker reports it in effect: the alter's answer
    comes when the controller has it, and the broker applies it a moment later (under load, after
    the service under test had already delivered a record the test meant to be refused)."""
    entry = ConfigEntry(name, str(value), incremental_operation=AlterConfigOpType.SET)
    change = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
    admin = admin_client(bootstrap)  # held until the answer comes
    admin.incremental_alter_configs([change])[change].result(30)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)

    def in_effect() -> bool:
        return admin.describe_configs([resource])[resource].result(30)[name].value == str(value)

    wait_for(in_effect, timeout_s=30, what=f"{topic}'s {name} = {value} in effect")


def _refuse_every_record(bootstrap: str, topic: str) -> None:
    """The broker refuses each record as too old (INVALID_TIMESTAMP): a refusal a retry can outlive."""
    _set_topic_config(bootstrap, topic, "message.timestamp.before.max.ms", 0)


def _accept_again(bootstrap: str, topic: str) -> None:
    _set_topic_config(bootstrap, topic, "message.timestamp.before.max.ms", 2**63 - 1)


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


ATTEMPTS = 5
"""Inputs fed, one at a time, until one's output is refused: a record that reaches the broker
within the millisecond it was stamped is not "too old", and the broker applies a topic config a
moment after it reports it, so an output may be accepted by chance (its inputs then rightly
committed). Five in a row by chance would be a broken refusal, not chance."""


def _refused_or_committed(runtime: ServiceRuntime, input_topic: str, failures: int, end: int) -> bool:
    """Poll until a delivery past ``failures`` is refused (True) or the inputs to ``end`` are
    committed (False: the output was accepted)."""
    _poll_until(
        runtime,
        lambda: runtime.stats.delivery_failures > failures or _committed(runtime, input_topic) >= end,
        "a refused delivery or the input committed",
    )
    return runtime.stats.delivery_failures > failures


def _refuse_then_accept(
    bootstrap: str, runtime: ServiceRuntime, input_topic: str, output_topic: str, feed: Callable[[int], None]
) -> None:
    """Outputs refused: failures counted, rewinds, no commit; then accepted: committed past the input.

    ``feed(i)`` sends the i-th input. After each, the runtime polls until its output is refused or
    its input committed (accepted by chance: the next input is fed). The check is made right after
    the poll that saw the refusal, before any retry can be accepted by the same chance."""
    for attempt in range(ATTEMPTS):
        failures = runtime.stats.delivery_failures
        feed(attempt)
        end = _end(runtime, input_topic)
        if _refused_or_committed(runtime, input_topic, failures, end):
            break
    else:
        pytest.fail(f"{ATTEMPTS} outputs in a row were accepted: the topic does not refuse them")
    assert runtime.stats.rewinds >= 1, "a failed delivery must rewind to the committed inputs"
    assert _committed(runtime, input_topic) < end, "inputs committed although their outputs were refused"
    _accept_again(bootstrap, output_topic)
    _poll_until(runtime, lambda: _committed(runtime, input_topic) == end, "the inputs to be committed")


def test_forecaster_commits_a_state_only_after_its_forecasts_are_delivered(kafka_broker, topic_prefix):
    first = cluster(0, history=[2.0, 3.0, 4.0])
    loop = new_loop(kafka_broker.bootstrap, topic_prefix, first, transactions=False)
    ensure_catalogue(kafka_broker.bootstrap, topic_prefix)
    forecasts_topic, states_topic = topic_prefix + FORECASTS.name, topic_prefix + CLUSTER_STATE.name
    _refuse_every_record(kafka_broker.bootstrap, forecasts_topic)
    parts = Parts(clock=loop.clock, seed=loop.seed, forecast_source=SeasonalNaiveSource(horizon_steps=8))
    runtime = build_runtime("forecaster", loop.settings, parts, metrics=loop.metrics)
    states = [cluster(i, history=[2.0, 3.0, 4.0]) for i in range(ATTEMPTS)]

    def feed(i: int) -> None:
        _produce(kafka_broker.bootstrap, states_topic, states[i])

    try:
        _refuse_then_accept(kafka_broker.bootstrap, runtime, states_topic, forecasts_topic, feed)
    finally:
        runtime.close()
    delivered = read_topic_to_end(kafka_broker.bootstrap, FORECASTS, idle_s=0.5, prefix=topic_prefix)
    issued = {f.issued_at for f in delivered if isinstance(f, DemandForecast)}
    assert issued & {state.as_of for state in states}
    failures = loop.metrics.delivery_failures.labels("forecaster")._value.get()
    assert failures == runtime.stats.delivery_failures >= 1


def test_state_republishes_a_refused_snapshot_and_commits_its_events_after(kafka_broker, topic_prefix):
    first = cluster(0, jobs=[job("j1", JobStatus.QUEUED, 0)], history=[2.0, 3.0])
    loop = new_loop(kafka_broker.bootstrap, topic_prefix, first, transactions=False)
    ensure_catalogue(kafka_broker.bootstrap, topic_prefix)
    states_topic, events_topic = topic_prefix + CLUSTER_STATE.name, topic_prefix + JOB_EVENTS.name
    _refuse_every_record(kafka_broker.bootstrap, states_topic)
    runtime = build_runtime(
        "state", loop.settings, Parts(clock=loop.clock, seed=loop.seed), metrics=loop.metrics
    )
    # each attempt submits one more job (j1, j2, ...): one job event the state must fold and publish
    states = [
        cluster(0, jobs=[job(f"j{k}", JobStatus.QUEUED, 0) for k in range(1, i + 2)], history=[2.0, 3.0])
        for i in range(ATTEMPTS)
    ]

    def feed(i: int) -> None:
        loop.feed(states[i - 1] if i else None, states[i])

    try:
        _refuse_then_accept(kafka_broker.bootstrap, runtime, events_topic, states_topic, feed)
    finally:
        runtime.close()
    snapshots = read_topic_to_end(kafka_broker.bootstrap, CLUSTER_STATE, idle_s=0.5, prefix=topic_prefix)
    assert any(isinstance(s, ClusterState) and "j1" in {j.spec.job_id for j in s.jobs} for s in snapshots)


def _produce(bootstrap: str, topic: str, event: ClusterState) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    producer.produce(topic, encode(event), key=event.key.encode())
    assert producer.flush(30) == 0


def _too_large_letters(bootstrap: str, prefix: str) -> list[DeadLetter]:
    letters = read_topic_to_end(bootstrap, DEAD_LETTERS, idle_s=0.5, prefix=prefix)
    return [x for x in letters if isinstance(x, DeadLetter) and "too large" in x.error]


def test_forecasts_the_broker_refuses_as_too_large_are_dead_lettered_and_the_inputs_committed(
    kafka_broker, topic_prefix
):
    first = cluster(0, history=[2.0, 3.0, 4.0])
    loop = new_loop(kafka_broker.bootstrap, topic_prefix, first, transactions=False)
    ensure_catalogue(kafka_broker.bootstrap, topic_prefix)
    forecasts_topic, states_topic = topic_prefix + FORECASTS.name, topic_prefix + CLUSTER_STATE.name
    _set_topic_config(kafka_broker.bootstrap, forecasts_topic, "max.message.bytes", 128)
    parts = Parts(clock=loop.clock, seed=loop.seed, forecast_source=SeasonalNaiveSource(horizon_steps=8))
    runtime = build_runtime("forecaster", loop.settings, parts, metrics=loop.metrics)
    try:
        _produce(kafka_broker.bootstrap, states_topic, first)
        _poll_until(runtime, lambda: runtime.stats.oversized >= 1, "an output refused as too large")
        end = _end(runtime, states_topic)
        _poll_until(runtime, lambda: _committed(runtime, states_topic) == end, "the state to be committed")
        assert runtime.stats.oversized >= 1 and runtime.stats.rewinds == 0
        assert runtime.stats.delivery_failures == 0, "a record too large for its topic is no retry"
    finally:
        runtime.close()
    letters = _too_large_letters(kafka_broker.bootstrap, topic_prefix)
    assert letters and {x.source_topic for x in letters} == {forecasts_topic}
    assert all("broker refused it" in x.error and "max.message.bytes" in x.error for x in letters)
    assert all("DemandForecast of" in x.error and x.consumer == "forecaster" for x in letters)


def _optimizer_runtime(loop, prefix: str, bootstrap: str, **extra) -> ServiceRuntime:  # type: ignore[no-untyped-def]
    """The optimizer as ``ebbtide run`` builds it on Apache Kafka: in a transaction."""
    settings = loop.settings
    return ServiceRuntime(
        processor=build_processor("optimizer", settings, Parts(clock=loop.clock, seed=loop.seed)),
        bootstrap=bootstrap,
        group_id=group_id_for("optimizer", settings),
        poll_timeout_s=0.1,
        transactional=True,
        transactional_id=f"{prefix}optimizer-too-large",
        topic_prefix=prefix,
        **extra,
    )


def _decide_once(bootstrap: str, prefix: str, runtime: ServiceRuntime, state: ClusterState) -> None:
    states_topic = prefix + CLUSTER_STATE.name
    _produce(bootstrap, states_topic, state)
    _poll_until(runtime, lambda: runtime.stats.oversized >= 1, "an output refused as too large")
    end = _end(runtime, states_topic)
    _poll_until(runtime, lambda: _committed(runtime, states_topic) == end, "the state to be committed")


def _thirty_queued_jobs() -> ClusterState:
    return cluster(0, jobs=[job(f"j{i}", JobStatus.QUEUED, 0) for i in range(30)], history=[2.0, 3.0, 4.0])


def test_an_optimizer_output_over_the_producer_limit_is_dead_lettered_in_its_transaction(
    kafka_broker, topic_prefix
):
    """The issue's crash loop: produce() raised MSG_SIZE_TOO_LARGE, the optimizer exited, replayed the
    same state and exited again. Now the plan is dead-lettered, the transaction commits, it goes on."""
    first = _thirty_queued_jobs()
    loop = new_loop(kafka_broker.bootstrap, topic_prefix, first, transactions=True)
    ensure_catalogue(kafka_broker.bootstrap, topic_prefix)
    # the 30-job plan is larger than 2,000 bytes; a dead letter is smaller
    runtime = _optimizer_runtime(loop, topic_prefix, kafka_broker.bootstrap, max_record_bytes=2000)
    try:
        _decide_once(kafka_broker.bootstrap, topic_prefix, runtime, first)
        assert runtime.stats.rewinds == 0
    finally:
        runtime.close()
    letters = _too_large_letters(kafka_broker.bootstrap, topic_prefix)
    plans = [x for x in letters if x.source_topic == topic_prefix + PLANS.name]
    assert plans, [x.error for x in letters]
    assert "HorizonPlan of" in plans[0].error and "producer refused it" in plans[0].error
    assert "message.max.bytes 2,000 bytes" in plans[0].error and plans[0].consumer == "optimizer"
    assert read_topic_to_end(kafka_broker.bootstrap, PLANS, idle_s=0.5, prefix=topic_prefix) == []


def test_a_plan_the_broker_refuses_aborts_once_and_its_replay_dead_letters_it(kafka_broker, topic_prefix):
    """In a transaction the refusal aborts it; the replay gives the same plan, which is dead-lettered
    instead of sent again, and the Allocation commits with it (no abort, replay, abort loop)."""
    first = _thirty_queued_jobs()
    loop = new_loop(kafka_broker.bootstrap, topic_prefix, first, transactions=True)
    ensure_catalogue(kafka_broker.bootstrap, topic_prefix)
    _set_topic_config(kafka_broker.bootstrap, topic_prefix + PLANS.name, "max.message.bytes", 128)
    runtime = _optimizer_runtime(loop, topic_prefix, kafka_broker.bootstrap)
    try:
        _decide_once(kafka_broker.bootstrap, topic_prefix, runtime, first)
        # one abort and replay, then the plan is dead-lettered (one more where a loaded host's time
        # limit made the replayed plan another, smaller one)
        assert 1 <= runtime.stats.rewinds <= 3, "the refused plan is dead-lettered, not retried for ever"
    finally:
        runtime.close()
    letters = _too_large_letters(kafka_broker.bootstrap, topic_prefix)
    assert letters and {x.source_topic for x in letters} == {topic_prefix + PLANS.name}
    assert "broker refused it" in letters[0].error and "HorizonPlan of" in letters[0].error
    assert read_topic_to_end(kafka_broker.bootstrap, PLANS, idle_s=0.5, prefix=topic_prefix) == []
    allocations = read_topic_to_end(kafka_broker.bootstrap, ALLOCATIONS, idle_s=0.5, prefix=topic_prefix)
    assert [a.issued_at for a in allocations] == [first.as_of]

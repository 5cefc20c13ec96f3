"""Transactions as the services run them (their own :class:`ServiceRuntime`, as the optimizer's):
a step whose transaction aborts leaves no output visible to the services' read_committed
consumers and commits no input offset, so the step is replayed and committed once; the aborted
records are in the log all the same (read_uncommitted sees them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, KafkaException
from event_samples import sample
from kafka_helpers import Collect, produce_events, raw_records, run_until

from schemas import DemandSample
from schemas.codec import decode
from schemas.topics import DEMAND_SAMPLES
from streams.inspect import group_lag
from streams.services.runtime import ServiceRuntime

pytestmark = pytest.mark.kafka

SOURCE = dataclasses.replace(DEMAND_SAMPLES, partitions=1)
SINK = dataclasses.replace(SOURCE, name=SOURCE.name + "-out")


def _demand(i: int) -> DemandSample:
    return sample(DemandSample, service=f"svc-{i}", requests_per_s=float(i))  # type: ignore[return-value]


def _abort_first_commit() -> Callable[[], None]:
    """A before-commit hook failing the first transaction as a lost produce would (abortable)."""
    calls: list[int] = []

    def hook() -> None:
        calls.append(1)
        if len(calls) == 1:
            error = KafkaError(KafkaError._STATE, "test: abort this one", txn_requires_abort=True)
            raise KafkaException(error)

    return hook


def test_an_aborted_step_is_invisible_replayed_and_committed_once(
    kafka_broker, kafka_topics, topic_prefix, group_id
) -> None:
    assert kafka_broker.transactions
    source, sink = kafka_topics(SOURCE, SINK)
    sent = [_demand(i) for i in range(4)]
    produce_events(kafka_broker.bootstrap, source.name, sent)
    copier = Collect(inputs=(SOURCE,), name="copier", answer=lambda event: [(SINK, event)])
    hook = _abort_first_commit()
    runtime = ServiceRuntime(
        processor=copier,
        bootstrap=kafka_broker.bootstrap,
        group_id=group_id("copier"),
        transactional=True,
        transactional_id=group_id("tx"),
        topic_prefix=topic_prefix,
        before_commit=hook,
    )
    try:
        run_until(runtime, lambda: runtime.stats.commits >= 1)
    finally:
        runtime.close()
    assert runtime.stats.rewinds == 1 and len(copier.got) == 8  # the aborted step, then its replay

    reader = Collect(inputs=(SINK,), name="reader")
    downstream = ServiceRuntime(reader, kafka_broker.bootstrap, group_id("reader"), topic_prefix=topic_prefix)
    try:
        run_until(downstream, lambda: len(reader.got) >= 4)
    finally:
        downstream.close()
    assert reader.got == sent  # once each: the services' consumers never see the aborted copies
    everything = raw_records(kafka_broker.bootstrap, sink.name, 1, want=8, committed_only=False)
    assert [
        decode(DemandSample, m.value()) for m in everything
    ] == sent + sent  # control: aborted ones are there
    (lag,) = group_lag(kafka_broker.bootstrap, group_id("copier"), [source.name])
    assert lag.committed and lag.lag_messages == 0  # the input offsets committed with the output

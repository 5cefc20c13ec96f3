"""A broker restart mid-run loses nothing acknowledged (marker ``kafka``; its own Apache Kafka).

The loop runs against a broker of its own (the session broker must not be restarted under other
tests). Mid-run the broker is stopped; the next step's job events are produced while it is down,
it comes back on the same log directory, and every acknowledged event and decision is there: the
Allocations decided before the restart are still readable and the next Allocation decides every
job, including those submitted while the broker was down.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from loop_factories import cluster, job
from loop_harness import new_loop, wait_for

from schemas import Allocation, JobStatus
from schemas.codec import encode
from schemas.topics import ALLOCATIONS, JOB_EVENTS
from streams.services.runtime import read_topic_to_end
from streams.state_diff import events_between

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(300)]


def _allocations(bootstrap: str, prefix: str) -> list[Allocation]:
    events = read_topic_to_end(bootstrap, ALLOCATIONS, idle_s=0.3, prefix=prefix)
    return [e for e in events if isinstance(e, Allocation)]


def test_broker_restart_mid_run_loses_nothing_acknowledged(tmp_path, topic_prefix):
    from streams.broker_kafka import start_local_kafka

    data_dir = tmp_path / "kafka"
    broker = start_local_kafka("restart-test", data_dir=data_dir)
    states = [
        cluster(0, [job("j0", JobStatus.QUEUED, 0)], history=[1.0, 2.0]),
        cluster(
            1,
            [job("j0", JobStatus.QUEUED, 0), job("j1", JobStatus.QUEUED, 1), job("j2", JobStatus.QUEUED, 1)],
            history=[1.0, 2.0, 3.0],
        ),
    ]
    loop = new_loop(broker.bootstrap, topic_prefix, states[0], transactions=True)
    try:
        loop.start_all()
        loop.feed(None, states[0])
        wait_for(lambda: len(loop.runtimes["state"].processor.fold.jobs) >= 1, timeout_s=60)
        loop.clock.when = states[0].as_of
        wait_for(
            lambda: any(a.issued_at == states[0].as_of for a in _allocations(broker.bootstrap, topic_prefix)),
            timeout_s=60,
            what="the first Allocation",
        )
        before = {a.plan_id for a in _allocations(broker.bootstrap, topic_prefix)}

        broker.stop()
        # Produced while the broker is down: buffered, acknowledged only once it is back.
        producer = Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "delivery.timeout.ms": 120_000,
            }
        )
        acked: list[str] = []
        jobs, _, _ = events_between(states[0], states[1])
        for event in jobs:
            producer.produce(
                topic_prefix + JOB_EVENTS.name,
                encode(event),
                key=event.key.encode(),
                on_delivery=lambda err, msg: acked.append(msg.key().decode()) if err is None else None,
            )
        broker = start_local_kafka("restart-test", data_dir=data_dir)
        assert producer.flush(120) == 0
        assert sorted(acked) == ["j1", "j2"]

        loop.feed(states[0], states[1])  # the step's demand and telemetry, after the restart
        wait_for(
            lambda: len(loop.runtimes["state"].processor.fold.jobs) >= 3,
            timeout_s=90,
            what="the state service to fold the jobs produced across the restart",
        )
        loop.clock.when = states[1].as_of
        wait_for(
            lambda: any(a.issued_at == states[1].as_of for a in _allocations(broker.bootstrap, topic_prefix)),
            timeout_s=90,
            what="the Allocation after the restart",
        )
        allocations = _allocations(broker.bootstrap, topic_prefix)
    finally:
        loop.stop_all()
        broker.stop()
    assert before <= {a.plan_id for a in allocations}
    after = next(a for a in allocations if a.issued_at == states[1].as_of)
    assert {j.job_id for j in after.jobs} == {"j0", "j1", "j2"}

"""The broker SIGKILLed mid-run loses nothing acknowledged (markers ``kafka``, ``slow``; its own Kafka).

The loop runs against a broker of its own (the session broker must not be killed under other
tests). Mid-step, the moment the clock reaches a step boundary (the optimizer planning, its
transaction open), the broker's JVM is SIGKILLed: no clean shutdown, no flushed segments, no
handed-off leadership. The next step's job events are produced while it is down; it is started
again on the same log directory and port. The loop goes on: every step has exactly one committed
Allocation, the one after the kill decides every job (those submitted while the broker was down
too), the actuator applies each step's plan and no (plan, target) twice.
"""

from __future__ import annotations

import os
import signal
from collections import Counter

import pytest
from confluent_kafka import Producer
from loop_factories import cluster, job
from loop_harness import Loop, new_loop, wait_for

from schemas import Allocation, ClusterState, JobStatus
from schemas.codec import encode
from schemas.topics import ALLOCATIONS, DEMAND_SAMPLES, GPU_SAMPLES, JOB_EVENTS
from streams.broker import BrokerHandle
from streams.services.runtime import read_topic_to_end
from streams.state_diff import events_between

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(300)]


def _states(steps: int) -> list[ClusterState]:
    history = [1.0, 2.0]
    states = []
    for step in range(steps):
        history = [*history, float(2 + step % 3)]
        states.append(
            cluster(step, [job(f"j{i}", JobStatus.QUEUED, i) for i in range(step + 1)], history=history)
        )
    return states


def _allocations(loop: Loop) -> list[Allocation]:
    events = read_topic_to_end(loop.bootstrap, ALLOCATIONS, idle_s=0.3, prefix=loop.prefix)
    return [e for e in events if isinstance(e, Allocation)]


def _step_to(loop: Loop, previous: ClusterState | None, state: ClusterState, feed: bool = True) -> None:
    if feed:
        loop.feed(previous, state)
    wait_for(
        lambda: len(loop.runtimes["state"].processor.fold.jobs) >= len(state.jobs),
        timeout_s=90,
        what="the state service to fold the step's jobs",
    )
    loop.clock.when = state.as_of


def _wait_applied(loop: Loop, state: ClusterState) -> None:
    wait_for(
        lambda: any(a.issued_at == state.as_of for a in _allocations(loop)),
        timeout_s=120,
        what=f"the Allocation of {state.as_of}",
    )
    plan = next(a.plan_id for a in _allocations(loop) if a.issued_at == state.as_of)
    wait_for(lambda: plan in loop.plans_done(), timeout_s=60, what="the actuator to apply it")


def sigkill_broker(broker: BrokerHandle) -> None:
    """SIGKILL the broker's JVM (its own process group), then reap it; no shutdown hook runs."""
    assert broker.pid is not None
    os.killpg(broker.pid, signal.SIGKILL)
    broker.stop()  # finds it dead: only reaps it


def _produce_while_down(
    bootstrap: str, prefix: str, previous: ClusterState, state: ClusterState
) -> tuple[Producer, list[str]]:
    """A step's events (jobs, demand, telemetry) buffered while the broker is down, acknowledged
    once it is back; the keys acknowledged so far."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "delivery.timeout.ms": 120_000,
        }
    )
    acked: list[str] = []
    jobs, demand, gpus = events_between(previous, state)
    for source, event in (
        [(JOB_EVENTS, e) for e in jobs]
        + [(DEMAND_SAMPLES, e) for e in demand]
        + [(GPU_SAMPLES, e) for e in gpus]
    ):
        producer.produce(
            prefix + source.name,
            encode(event),
            key=event.key.encode(),
            on_delivery=lambda err, msg: acked.append(msg.key().decode()) if err is None else None,
        )
    return producer, acked


def test_broker_sigkilled_mid_step_restarts_and_the_loop_loses_nothing(tmp_path, topic_prefix):
    from streams.broker_kafka import start_local_kafka

    data_dir = tmp_path / "kafka"
    broker = start_local_kafka("kill-test", data_dir=data_dir)
    states = _states(4)
    loop = new_loop(broker.bootstrap, topic_prefix, states[0], transactions=True)
    try:
        loop.start_all()
        for i in (0, 1):
            _step_to(loop, states[i - 1] if i else None, states[i])
            _wait_applied(loop, states[i])
        _step_to(loop, states[1], states[2])  # the boundary passes: the optimizer plans step 2...
        sigkill_broker(broker)  # ...and the broker dies under it
        producer, acked = _produce_while_down(broker.bootstrap, topic_prefix, states[2], states[3])
        bootstrap = broker.bootstrap
        broker = start_local_kafka("kill-test", data_dir=data_dir)
        assert broker.bootstrap == bootstrap  # the same port: the clients reconnect on their own
        assert producer.flush(120) == 0 and "j3" in acked and len(acked) == len(set(acked))
        _wait_applied(loop, states[2])
        _step_to(loop, states[2], states[3], feed=False)  # its events all came across the kill
        _wait_applied(loop, states[3])
        allocations = _allocations(loop)
    finally:
        loop.stop_all()
        broker.stop()
    per_step = Counter(a.issued_at for a in allocations)
    assert {s.as_of: per_step[s.as_of] for s in states} == {s.as_of: 1 for s in states}
    last = next(a for a in allocations if a.issued_at == states[3].as_of)
    assert {j.job_id for j in last.jobs} == {"j0", "j1", "j2", "j3"}
    assert loop.applied and len(loop.applied) == len(set(loop.applied))
    assert {a.plan_id for a in allocations} <= loop.plans_done()

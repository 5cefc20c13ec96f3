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

import pytest
from confluent_kafka import Producer
from loop_harness import (
    allocations,
    assert_each_step_once,
    new_loop,
    sigkill_broker,
    step_to,
    steps,
    wait_applied,
)

from schemas import ClusterState
from schemas.codec import encode
from schemas.topics import DEMAND_SAMPLES, GPU_SAMPLES, JOB_EVENTS
from streams.state_diff import events_between

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(300)]


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
    states = steps(4)
    loop = new_loop(broker.bootstrap, topic_prefix, states[0], transactions=True)
    try:
        loop.start_all()
        for i in (0, 1):
            step_to(loop, states[i - 1] if i else None, states[i])
            wait_applied(loop, states[i])
        step_to(loop, states[1], states[2])  # the boundary passes: the optimizer plans step 2...
        sigkill_broker(broker)  # ...and the broker dies under it
        producer, acked = _produce_while_down(broker.bootstrap, topic_prefix, states[2], states[3])
        bootstrap = broker.bootstrap
        broker = start_local_kafka("kill-test", data_dir=data_dir)
        assert broker.bootstrap == bootstrap  # the same port: the clients reconnect on their own
        assert producer.flush(120) == 0 and "j3" in acked and len(acked) == len(set(acked))
        wait_applied(loop, states[2])
        step_to(loop, states[2], states[3], feed=False)  # its events all came across the kill
        wait_applied(loop, states[3])
        committed = allocations(loop)
    finally:
        loop.stop_all()
        broker.stop()
    assert_each_step_once(loop, states, committed)

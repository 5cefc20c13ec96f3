"""The demo's lockstep driver: a simulated cluster talking to the real services over a broker.

Each step: the simulator's snapshot becomes wire events (streams.state_diff) produced to the
job-event, demand and telemetry topics; once the state service has read them, the demo clock
moves to the step boundary, the state service publishes the ClusterState, the forecaster and the
optimizer answer, and the actuator applies the Allocation to the simulator (its backend here).
Then the simulator integrates the step. Every service is the same object ``ebbtide run`` starts
(built by the composition root, ebbtide/demo_wiring.py); only the clock and the actuator backend
are the simulator's.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from confluent_kafka import Message, Producer

from schemas import ActuationResult, Allocation, ClusterState, DemandForecast
from schemas.codec import encode
from schemas.targets import plan_target
from schemas.topics import DEMAND_SAMPLES, GPU_SAMPLES, JOB_EVENTS, PRODUCER_LIMITS
from streams.kafka_client import Brokers, client_config
from streams.services.runtime import ServiceRuntime
from streams.services.threads import run_threads
from streams.state_diff import events_between


class DemoError(RuntimeError):
    """The demo could not go on (a service failed or a step did not complete in time)."""


class FeedClock:
    """The state service's clock in the demo: the driver moves it to each step boundary."""

    def __init__(self, start: datetime) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def set(self, when: datetime) -> None:
        with self._lock:
            self._now = when


KEEP_APPLIED_STEPS = 4
"""Steps of applied Allocations the demo backend remembers (the driver waits on the current one)."""


class SimulatorBackend:
    """The actuator backend of the demo: applies an Allocation to the simulated cluster.

    Only the Allocation for the simulator's current step is applied; any other (a replay, or
    one decided from a snapshot of another step) is answered ``skipped`` with the reason. It
    remembers the Allocations of the last :data:`KEEP_APPLIED_STEPS` steps only (the driver asks
    for the current step's), so a run of days holds no more than a long one of minutes.
    """

    def __init__(self, sim: object, cluster: str) -> None:
        self.sim = sim
        self.cluster = cluster
        self.applied: dict[datetime, Allocation] = {}
        self._lock = threading.Lock()

    def apply(self, allocation: Allocation) -> Sequence[ActuationResult]:
        now = self.sim.clock.now()  # type: ignore[attr-defined]
        if allocation.issued_at != now:
            return [
                ActuationResult(
                    cluster=allocation.cluster,
                    backend="simulator",
                    plan_id=allocation.plan_id,
                    action="none",
                    target=plan_target(allocation.plan_id),
                    outcome="skipped",
                    time=now,
                    error=f"issued for {allocation.issued_at.isoformat()}, "
                    f"the simulator is at {now.isoformat()}",
                )
            ]
        results: Sequence[ActuationResult] = self.sim.apply(allocation)  # type: ignore[attr-defined]
        with self._lock:
            self.applied[now] = allocation
            while len(self.applied) > KEEP_APPLIED_STEPS:
                del self.applied[next(iter(self.applied))]  # the oldest step (insertion order)
        return results

    def allocation_for(self, when: datetime) -> Allocation | None:
        with self._lock:
            return self.applied.get(when)


@dataclass
class StepView:
    index: int
    total: int
    as_of: datetime
    allocation: Allocation
    state: ClusterState
    forecasts: dict[str, DemandForecast]
    demand_gpus: dict[str, float]
    step_wall_s: float


@dataclass
class DemoRun:
    steps: list[StepView] = field(default_factory=list)
    decision_ms: list[float] = field(default_factory=list)
    produced_events: int = 0
    dead_letters: int = 0
    service_stats: dict[str, dict[str, int]] = field(default_factory=dict)


def _delivered(offsets: dict[tuple[str, int], int]) -> Callable[[object, Message], None]:
    def callback(err: object, msg: Message) -> None:
        if err is None:
            key = (msg.topic() or "", msg.partition() or 0)
            offsets[key] = max(offsets.get(key, 0), (msg.offset() or 0) + 1)

    return callback


@dataclass
class DemoServices:
    """The four stream services of the demo, built by the composition root around the simulator."""

    runtimes: dict[str, ServiceRuntime]
    backend: SimulatorBackend
    feed_clock: FeedClock
    decision_ms: list[float]


class StepFeed:
    """Produces each step's events and waits until the state service has read them all."""

    def __init__(self, bootstrap: Brokers, prefix: str) -> None:
        self.prefix = prefix
        self.producer = Producer(
            client_config(bootstrap, {"enable.idempotence": True, "linger.ms": 5, **PRODUCER_LIMITS})
        )
        self.offsets: dict[tuple[str, int], int] = {}
        self.produced = 0

    def publish(self, previous: ClusterState | None, state: ClusterState) -> None:
        jobs, demand, gpus = events_between(previous, state)
        on_delivery = _delivered(self.offsets)
        for source, events in ((JOB_EVENTS, jobs), (DEMAND_SAMPLES, demand), (GPU_SAMPLES, gpus)):
            for event in events:
                self.producer.produce(
                    self.prefix + source.name, encode(event), key=event.key.encode(), on_delivery=on_delivery
                )
                self.produced += 1
                self.producer.poll(0)
        if self.producer.flush(30):
            raise DemoError("the broker did not acknowledge the step's events within 30 s")

    def wait_read(self, state_rt: ServiceRuntime, failures: list[str], deadline: float) -> None:
        while any(state_rt.stats.positions.get(k, 0) < v for k, v in self.offsets.items()):  # prefixed names
            _check(failures, deadline, "the state service to read the step's events")
            time.sleep(0.005)


def run_demo_loop(
    sim: object,
    services: DemoServices,
    *,
    bootstrap: Brokers,
    prefix: str,
    steps: int,
    on_step: Callable[[StepView], None] | None = None,
    step_timeout_s: float = 120.0,
    keep_steps: bool = True,
) -> DemoRun:
    """Drive ``steps`` steps of ``sim`` through ``services`` over the broker at ``bootstrap``.

    ``keep_steps=False`` keeps no StepView in ``DemoRun.steps`` (a long soak would hold every snapshot).
    """
    first = sim.snapshot(sim.clock.now())  # type: ignore[attr-defined]
    run = DemoRun(decision_ms=services.decision_ms)
    failures: list[str] = []
    stop = threading.Event()
    runtimes = services.runtimes
    threads = run_threads(runtimes, stop, on_error=lambda name, exc: failures.append(f"{name}: {exc}"))
    feed = StepFeed(bootstrap, prefix)
    previous: ClusterState | None = None
    try:
        for index in range(steps):
            t0 = time.perf_counter()
            state = first if index == 0 else sim.snapshot(sim.clock.now())  # type: ignore[attr-defined]
            feed.publish(previous, state)
            deadline = time.monotonic() + step_timeout_s
            feed.wait_read(runtimes["state"], failures, deadline)
            services.feed_clock.set(state.as_of)
            allocation = _wait_allocation(services.backend, state.as_of, failures, deadline)
            view = _step_view(index, steps, state, allocation, runtimes, time.perf_counter() - t0)
            if keep_steps:
                run.steps.append(view)
            if on_step is not None:
                on_step(view)
            sim.advance()  # type: ignore[attr-defined]
            previous = state
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=15)
        feed.producer.flush(5)
        run.produced_events = feed.produced
        _record_stats(run, runtimes)
        del feed, threads
        gc.collect()  # destroy the Kafka clients before the caller stops the broker
    return run


def _wait_allocation(
    backend: SimulatorBackend, when: datetime, failures: list[str], deadline: float
) -> Allocation:
    allocation = backend.allocation_for(when)
    while allocation is None:
        _check(failures, deadline, f"the Allocation for {when.isoformat()}")
        time.sleep(0.005)
        allocation = backend.allocation_for(when)
    return allocation


def _step_view(
    index: int,
    total: int,
    state: ClusterState,
    allocation: Allocation,
    runtimes: dict[str, ServiceRuntime],
    wall_s: float,
) -> StepView:
    forecaster = runtimes["forecaster"].processor
    latest = getattr(forecaster, "latest", {})
    return StepView(
        index=index + 1,
        total=total,
        as_of=state.as_of,
        allocation=allocation,
        state=state,
        forecasts={svc: f for (c, svc), f in latest.items() if c == state.cluster},
        demand_gpus={
            s.spec.service: (s.demand_history[-1] if s.demand_history else 0.0) for s in state.services
        },
        step_wall_s=wall_s,
    )


def _record_stats(run: DemoRun, runtimes: dict[str, ServiceRuntime]) -> None:
    run.service_stats = {
        name: {
            "consumed": rt.stats.consumed,
            "produced": rt.stats.produced,
            "dead_lettered": rt.stats.dead_lettered,
            "commits": rt.stats.commits,
        }
        for name, rt in runtimes.items()
    }
    run.dead_letters = sum(rt.stats.dead_lettered for rt in runtimes.values())


def _check(failures: list[str], deadline: float, what: str) -> None:
    if failures:
        raise DemoError(f"a service failed: {failures[0]}")
    if time.monotonic() > deadline:
        raise DemoError(f"timed out waiting for {what}")

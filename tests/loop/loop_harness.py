"""A running loop for the integration tests: the four consumer services as threads on a real broker.

Each test gets its own topic prefix and consumer groups, a manual clock it moves step by step,
the fifo baseline as the policy (fast and deterministic) and the engine-backed dry run
(actuators/) as the actuator, on the manual clock, recording each (plan, target) it changed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from confluent_kafka import Producer
from loop_factories import cluster, job
from prometheus_client import CollectorRegistry

from actuators.dryrun import DryRunBackend
from actuators.engine import ActuationEngine
from ebbtide.settings import Settings, load_settings
from ebbtide.wiring import Parts, build_runtime
from schemas import Allocation, ClusterState, JobStatus
from schemas.codec import encode
from schemas.targets import parse_target
from schemas.topics import ALLOCATIONS, DEMAND_SAMPLES, GPU_SAMPLES, JOB_EVENTS
from simulator.policies.fifo import FifoPolicy
from streams.broker import BrokerHandle
from streams.health import Heartbeat
from streams.metrics import EbbtideMetrics
from streams.services.runtime import ServiceRuntime, read_topic_to_end
from streams.state_diff import events_between, seed_of
from streams.topics_admin import ensure_catalogue


class ManualClock:
    def __init__(self, when: datetime) -> None:
        self.when = when

    def now(self) -> datetime:
        return self.when


@dataclass
class Loop:
    bootstrap: str
    prefix: str
    seed: ClusterState
    clock: ManualClock
    transactions: bool
    replicas: int = 1  # the topics' replication factor: the brokers of the test's cluster
    dry: DryRunBackend = field(init=False)
    backend: ActuationEngine = field(init=False)
    runtimes: dict[str, ServiceRuntime] = field(default_factory=dict)
    threads: dict[str, tuple[threading.Thread, threading.Event]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    stopped: dict[str, ServiceRuntime] = field(default_factory=dict)
    metrics: EbbtideMetrics = field(default_factory=lambda: EbbtideMetrics(CollectorRegistry()))
    heartbeats: dict[str, Heartbeat] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.dry = DryRunBackend(cluster=self.seed.cluster, clock=self.clock.now, adopt_unknown_jobs=True)
        self.backend = ActuationEngine(self.dry, self.seed.cluster, clock=self.clock.now)

    @property
    def applied(self) -> list[tuple[str, str]]:
        """(plan_id, target) of every change the dry run made, in order."""
        return self.dry.applied

    @property
    def settings(self) -> Settings:
        return load_settings(
            cluster=self.seed.cluster,
            step_s=self.seed.step_s,
            horizon_steps=8,
            metrics_enabled=False,
            kafka={
                "bootstrap_servers": self.bootstrap,
                "topic_prefix": self.prefix,
                "group_prefix": self.prefix,
                "session_timeout_ms": 6000,
                "poll_timeout_s": 0.1,
                "replication_factor": self.replicas,
            },
            optimizer={"transactions": "on" if self.transactions else "off", "forecast_wait_s": 1.0},
        )

    def start(self, name: str) -> None:
        parts = Parts(
            clock=self.clock,
            seed=self.seed,
            policy=FifoPolicy(),
            backend=self.backend,
            replan_on_events=False,
        )
        self.heartbeats[name] = Heartbeat(name)
        runtime = build_runtime(
            name,
            self.settings,
            parts,
            transactions=self.transactions,
            metrics=self.metrics,
            heartbeat=self.heartbeats[name],
        )
        stop = threading.Event()

        def loop() -> None:
            try:
                while not stop.is_set():
                    runtime.poll_once()
            except Exception as exc:  # recorded: a test fails if any service crashed
                self.errors.append(f"{name}: {exc!r}")

        thread = threading.Thread(target=loop, daemon=True, name=f"test-{name}")
        thread.start()
        self.runtimes[name] = runtime
        self.threads[name] = (thread, stop)

    def process_env(self) -> dict[str, str]:
        """The same settings as the in-process services, as a separately started service reads them."""
        return {
            **os.environ,
            "EBBTIDE_CLUSTER": self.seed.cluster,
            "EBBTIDE_STEP_S": str(self.seed.step_s),
            "EBBTIDE_HORIZON_STEPS": "8",
            "EBBTIDE_METRICS_ENABLED": "false",
            "EBBTIDE_KAFKA__BOOTSTRAP_SERVERS": self.bootstrap,
            "EBBTIDE_KAFKA__TOPIC_PREFIX": self.prefix,
            "EBBTIDE_KAFKA__GROUP_PREFIX": self.prefix,
            "EBBTIDE_KAFKA__POLL_TIMEOUT_S": "0.1",
            "EBBTIDE_KAFKA__REPLICATION_FACTOR": str(self.replicas),
            "EBBTIDE_OPTIMIZER__TRANSACTIONS": "on" if self.transactions else "off",
            "EBBTIDE_OPTIMIZER__FORECAST_WAIT_S": "1.0",
        }

    def start_process(
        self, name: str, env: dict[str, str] | None = None, log_path: str | None = None
    ) -> subprocess.Popen[bytes]:
        """``ebbtide run <name>`` as its own process (so a test can really kill it); ``env`` adds
        to its settings (a test hook), ``log_path`` keeps its output (appended)."""
        out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115
        try:
            return subprocess.Popen(
                [sys.executable, "-m", "ebbtide.cli", "run", name],
                env={**self.process_env(), **(env or {})},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        finally:
            if log_path:
                out.close()  # type: ignore[union-attr]

    def stop(self, name: str, graceful: bool = True) -> None:
        thread, stop = self.threads.pop(name)
        stop.set()
        thread.join(timeout=20)
        runtime = self.runtimes.pop(name)
        self.stopped[name] = runtime
        if graceful:
            runtime.close()

    def start_all(self) -> None:
        ensure_catalogue(self.bootstrap, self.prefix, self.settings.kafka.durability())
        for name in ("state", "forecaster", "optimizer", "actuator"):
            self.start(name)

    def stop_all(self) -> None:
        for name in list(self.threads):
            self.stop(name)
        assert not self.errors, f"a service crashed: {self.errors}"

    def feed(self, previous: ClusterState | None, current: ClusterState) -> int:
        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all"})
        jobs, demand, gpus = events_between(previous, current)
        count = 0
        for source, events in ((JOB_EVENTS, jobs), (DEMAND_SAMPLES, demand), (GPU_SAMPLES, gpus)):
            for event in events:
                producer.produce(self.prefix + source.name, encode(event), key=event.key.encode())
                count += 1
        assert producer.flush(30) == 0
        return count

    def plans_done(self) -> set[str]:
        """Plans the actuator has acted on (an empty plan has no target but is done too)."""
        runtime = self.runtimes.get("actuator") or self.stopped.get("actuator")
        return set(runtime.processor.plans_done) if runtime is not None else set()

    def applied_plans(self) -> Counter[str]:
        return Counter(
            plan for plan, target in self.applied if parse_target(target).kind in ("job", "service")
        )


def wait_for(predicate, timeout_s: float = 30.0, what: str = "condition") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def new_loop(bootstrap: str, prefix: str, first: ClusterState, transactions: bool, replicas: int = 1) -> Loop:
    # The clock starts a step early: the first snapshot (published at start) precedes the first events.
    return Loop(
        bootstrap=bootstrap,
        prefix=prefix,
        seed=seed_of(first),
        clock=ManualClock(first.as_of - timedelta(seconds=first.step_s)),
        transactions=transactions,
        replicas=replicas,
    )


def steps(count: int) -> list[ClusterState]:
    """``count`` step snapshots, a queued job more each step (j0, j1, ...), the demand moving."""
    history = [1.0, 2.0]
    states = []
    for step in range(count):
        history = [*history, float(2 + step % 3)]
        states.append(
            cluster(step, [job(f"j{i}", JobStatus.QUEUED, i) for i in range(step + 1)], history=history)
        )
    return states


def allocations(loop: Loop) -> list[Allocation]:
    """Every committed Allocation (read_committed), in offset order, duplicates kept."""
    events = read_topic_to_end(loop.bootstrap, ALLOCATIONS, idle_s=0.3, prefix=loop.prefix)
    return [e for e in events if isinstance(e, Allocation)]


def step_to(loop: Loop, previous: ClusterState | None, state: ClusterState, feed: bool = True) -> None:
    """Feed a step's events (unless already produced), wait until folded, move the clock to it."""
    if feed:
        loop.feed(previous, state)
    wait_for(
        lambda: len(loop.runtimes["state"].processor.fold.jobs) >= len(state.jobs),
        timeout_s=90,
        what="the state service to fold the step's jobs",
    )
    loop.clock.when = state.as_of


def wait_applied(loop: Loop, state: ClusterState) -> None:
    """Wait for the step's Allocation and for the actuator to have acted on it."""
    wait_for(
        lambda: any(a.issued_at == state.as_of for a in allocations(loop)),
        timeout_s=120,
        what=f"the Allocation of {state.as_of}",
    )
    plan = next(a.plan_id for a in allocations(loop) if a.issued_at == state.as_of)
    wait_for(lambda: plan in loop.plans_done(), timeout_s=60, what="the actuator to apply it")


def sigkill_broker(broker: BrokerHandle) -> None:
    """SIGKILL the broker's JVM (its own process group), then reap it; no shutdown hook runs.
    The handle's pid is cleared: it names no process of ours any more."""
    assert broker.pid is not None
    os.killpg(broker.pid, signal.SIGKILL)  # unreaped until stop(): the pid cannot be reused
    broker.stop()  # finds it dead: only reaps it
    broker.pid = None


def assert_each_step_once(loop: Loop, states: list[ClusterState], committed: list[Allocation]) -> None:
    """Exactly one committed Allocation per step (counted), the last deciding every job, each
    acted on by the actuator, and no (plan, target) applied twice."""
    per_step = Counter(a.issued_at for a in committed)
    assert {s.as_of: per_step[s.as_of] for s in states} == {s.as_of: 1 for s in states}
    last = next(a for a in committed if a.issued_at == states[-1].as_of)
    assert {j.job_id for j in last.jobs} == {j.spec.job_id for j in states[-1].jobs}
    assert {a.plan_id for a in committed} <= loop.plans_done()
    assert loop.applied and len(loop.applied) == len(set(loop.applied))

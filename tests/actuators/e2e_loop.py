"""What the Kubernetes and Slurm end-to-end tests share: the services as threads built by the wiring,
``ebbtide run source`` as its own process, the settings, reading the topics back, and the check that
each job went through its life once.

Each test adds its own cluster, its own sampler of what the cluster ran and its own timeline.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ebbtide.settings import Settings, load_settings
from ebbtide.wiring import build_runtime
from schemas import ActuationResult, JobEvent, JobEventKind
from schemas.topics import ACTUATIONS, JOB_EVENTS
from streams.metrics import EbbtideMetrics
from streams.services.runtime import read_topic_to_end

STEP_S = 4
LOOP_SERVICES = ("state", "forecaster", "optimizer", "actuator")


class Threads:
    """The services as threads; a test fails if any of them raised."""

    def __init__(self) -> None:
        self.running: dict[str, tuple[threading.Thread, threading.Event]] = {}
        self.errors: list[str] = []

    def start(self, name: str, body: Callable[[threading.Event], None]) -> None:
        stop = threading.Event()

        def run() -> None:
            try:
                body(stop)
            except Exception as exc:  # recorded: asserted at the end
                self.errors.append(f"{name}: {exc!r}")

        thread = threading.Thread(target=run, name=f"e2e-{name}", daemon=True)
        thread.start()
        self.running[name] = (thread, stop)

    def stop(self, name: str) -> None:
        thread, stop = self.running.pop(name)
        stop.set()
        thread.join(timeout=30)

    def stop_all(self) -> None:
        for name in list(self.running):
            self.stop(name)


def start_service(threads: Threads, name: str, settings: Settings, transactions: bool,
                  metrics: EbbtideMetrics) -> None:  # fmt: skip
    """``ebbtide run <name>`` as a thread: the runtime the wiring builds, polled until stopped."""
    runtime = build_runtime(name, settings, transactions=transactions, metrics=metrics)

    def body(stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                runtime.poll_once()
        finally:
            runtime.close()

    threads.start(name, body)


def e2e_settings(
    bootstrap: str, prefix: str, spec: Path, *, backend: str, actuator: Mapping[str, Any]
) -> Settings:
    """A 4 s step on the session's one broker; ``backend`` runs the actuator and the source."""
    return load_settings(
        cluster="e2e",
        step_s=STEP_S,
        horizon_steps=12,
        metrics_enabled=False,
        cluster_spec=spec,
        kafka={
            "bootstrap_servers": bootstrap,
            "topic_prefix": prefix,
            "group_prefix": prefix,
            "session_timeout_ms": 6000,
            "poll_timeout_s": 0.1,
            "replication_factor": 1,  # the session's one broker
        },
        optimizer={"forecast_wait_s": 0.0},
        actuator={"backend": backend, "checkpoint_grace_s": 0, **actuator},
        source={"backend": backend, "interval_s": 1.0},
    )


def start_source_process(
    settings: Settings, log: Path, backend_env: Mapping[str, str]
) -> subprocess.Popen[bytes]:
    """``ebbtide run source`` as its own process, the same settings from the environment
    (``backend_env``: the backend's own settings)."""
    env = {
        **os.environ,
        "EBBTIDE_CLUSTER": settings.cluster,
        "EBBTIDE_STEP_S": str(settings.step_s),
        "EBBTIDE_CLUSTER_SPEC": str(settings.cluster_spec),
        "EBBTIDE_METRICS_ENABLED": "false",
        "EBBTIDE_KAFKA__BOOTSTRAP_SERVERS": settings.kafka.bootstrap_servers,
        "EBBTIDE_KAFKA__TOPIC_PREFIX": settings.kafka.topic_prefix,
        "EBBTIDE_KAFKA__GROUP_PREFIX": settings.kafka.group_prefix,
        "EBBTIDE_KAFKA__REPLICATION_FACTOR": str(settings.kafka.replication_factor),
        "EBBTIDE_SOURCE__BACKEND": settings.source.backend,
        "EBBTIDE_SOURCE__INTERVAL_S": str(settings.source.interval_s),
        **backend_env,
    }
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", "ebbtide.cli", "run", "source"], env=env,
                                stdout=out, stderr=subprocess.STDOUT)  # fmt: skip


def actuations(settings: Settings) -> list[ActuationResult]:
    read = read_topic_to_end(settings.kafka.bootstrap_servers, ACTUATIONS, idle_s=0.2,
                             prefix=settings.kafka.topic_prefix)  # fmt: skip
    return [r for r in read if isinstance(r, ActuationResult)]


def job_events(settings: Settings) -> list[JobEvent]:
    read = read_topic_to_end(settings.kafka.bootstrap_servers, JOB_EVENTS, idle_s=0.2,
                             prefix=settings.kafka.topic_prefix)  # fmt: skip
    return [e for e in read if isinstance(e, JobEvent) and e.cluster == "e2e"]


def finished_jobs(settings: Settings) -> set[str]:
    return {e.job_id for e in job_events(settings) if e.kind == JobEventKind.FINISHED}


def assert_each_job_lived_once(events: list[JobEvent], keys: Mapping[str, str]) -> None:
    """Every job submitted, started and finished exactly once (restarts repeated nothing), and none
    failed, was cancelled or was preempted."""
    per_job = Counter((e.job_id, e.kind) for e in events)
    for key in keys:
        for kind in (JobEventKind.SUBMITTED, JobEventKind.STARTED, JobEventKind.FINISHED):
            assert per_job[(key, kind)] == 1, (keys[key], kind, per_job)
    ended_badly = (JobEventKind.FAILED, JobEventKind.CANCELLED, JobEventKind.PREEMPTED)
    assert not [e for e in events if e.kind in ended_badly]


def timeline_rows(settings: Settings, events: list[JobEvent], keys: Mapping[str, str], start: float,
                  applied_as: str) -> list[tuple[float, str, str, str]]:  # fmt: skip
    """(seconds from ``start``, job, what, pool) for each job event and each job's first applied run."""
    rows = [(e.time.timestamp() - start, keys[e.job_id], e.kind.value, e.pool or "") for e in events]
    applied: dict[str, float] = {}
    for r in actuations(settings):
        if r.action == "run" and r.outcome == "applied":
            applied.setdefault(r.target.removeprefix("job/"), r.time.timestamp() - start)
    rows += [(at_s, keys.get(job_id, job_id), applied_as, "") for job_id, at_s in applied.items()]
    return sorted(rows)

"""ebbtide end to end on a real Slurm cluster over a real Apache Kafka broker (``e2e``, ``slurm``).

Users ``sbatch --hold`` short jobs with ebbtide comments; ``ebbtide run source`` runs as its own
process, the state, forecaster, optimizer (the ebbtide planner) and actuator (backend ``slurm``)
as threads, each built by the wiring from settings as ``ebbtide run <service>`` builds it, on a
4 s step. ebbtide observes the jobs, releases them on a partition, Slurm runs them (``sleep``),
they complete, ebbtide sees it and releases the next. Mid-run the source process is SIGKILLed and
started again: it resumes from what it published.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from slurm_cluster import SlurmCluster
from test_slurm_real import wait_for

from actuators.slurm.records import job_gpus, job_phase
from ebbtide.settings import Settings, load_settings
from ebbtide.wiring import build_runtime
from schemas import ActuationResult, JobEvent, JobEventKind
from schemas.topics import ACTUATIONS, JOB_EVENTS
from streams.metrics import EbbtideMetrics
from streams.services.runtime import read_topic_to_end
from streams.topics_admin import ensure_catalogue

pytestmark = [pytest.mark.e2e, pytest.mark.slurm, pytest.mark.kafka, pytest.mark.timeout(300)]

STEP_S = 4
SPEC = """
pools:
  - {name: pool-a, gpu_type: fake, gpus_total: 16, gpus_available: 16, gpus_per_node: 8}
  - {name: pool-b, gpu_type: fake, gpus_total: 16, gpus_available: 16, gpus_per_node: 8}
"""
# (name, partitions, GPUs): pool-a holds two 8-GPU jobs at once, so its jobs go in waves.
JOBS = [
    ("a1", "pool-a", 8), ("a2", "pool-a", 8), ("a3", "pool-a", 8), ("a4", "pool-a", 8),
    ("ab1", "pool-a,pool-b", 8), ("ab2", "pool-a,pool-b", 4), ("b1", "pool-b", 8),
]  # fmt: skip
RUN_S = 3


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


def e2e_settings(bootstrap: str, prefix: str, slurm: SlurmCluster, spec: Path) -> Settings:
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
        actuator={"backend": "slurm", "checkpoint_grace_s": 0, "slurm": {"slurm_conf": slurm.conf}},
        source={"backend": "slurm", "interval_s": 1.0},
    )


def start_source_process(settings: Settings, log: Path) -> subprocess.Popen[bytes]:
    """``ebbtide run source`` as its own process, with the same settings from the environment."""
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
        "EBBTIDE_SOURCE__BACKEND": "slurm",
        "EBBTIDE_SOURCE__INTERVAL_S": str(settings.source.interval_s),
        "EBBTIDE_ACTUATOR__SLURM__SLURM_CONF": str(settings.actuator.slurm.slurm_conf),
    }
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", "ebbtide.cli", "run", "source"], env=env,
                                stdout=out, stderr=subprocess.STDOUT)  # fmt: skip


def start_service(threads: Threads, name: str, settings: Settings, transactions: bool,
                  metrics: EbbtideMetrics) -> None:  # fmt: skip
    runtime = build_runtime(name, settings, transactions=transactions, metrics=metrics)

    def body(stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                runtime.poll_once()
        finally:
            runtime.close()

    threads.start(name, body)


class Sampler:
    """squeue every 0.3 s: the most GPUs running jobs held per partition at once."""

    def __init__(self, slurm: SlurmCluster) -> None:
        self.slurm = slurm
        self.peak: dict[str, int] = defaultdict(int)
        self.samples = 0

    def __call__(self, stop: threading.Event) -> None:
        while not stop.wait(0.3):
            jobs = json.loads(self.slurm.run("squeue", "--json").stdout)["jobs"]
            used: dict[str, int] = defaultdict(int)
            for job in jobs:
                if job_phase(job) == "running":
                    used[str(job["partition"])] += job_gpus(job)
            for partition, gpus in used.items():
                self.peak[partition] = max(self.peak[partition], gpus)
            self.samples += 1


def test_held_slurm_jobs_are_released_run_complete_and_a_source_restart_repeats_nothing(
    accounted_cluster: SlurmCluster, kafka_broker, topic_prefix: str, tmp_path: Path
) -> None:
    """On a cluster keeping accounting that forgets ended jobs after 2 s: they leave squeue, and
    sacct says how they ended."""
    slurm_cluster = accounted_cluster
    spec = tmp_path / "cluster.yaml"
    spec.write_text(SPEC)
    settings = e2e_settings(kafka_broker.bootstrap, topic_prefix, slurm_cluster, spec)
    ensure_catalogue(kafka_broker.bootstrap, topic_prefix)
    t0 = time.monotonic()
    ids = {}
    for name, partitions, gpus in JOBS:
        comment = f"ebbtide: est_gpu_s={gpus * RUN_S} weight=1 preemptible=no team=e2e"
        ids[name] = slurm_cluster.submit(name, partitions, gpus=gpus, comment=comment, run_s=RUN_S)
    keys = {f"e2e-{sid}": name for name, sid in ids.items()}
    metrics = EbbtideMetrics(CollectorRegistry())
    threads, sampler = Threads(), Sampler(slurm_cluster)
    threads.start("sampler", sampler)
    log = tmp_path / "source.log"
    source = start_source_process(settings, log)
    for name in ("state", "forecaster", "optimizer", "actuator"):
        start_service(threads, name, settings, kafka_broker.transactions, metrics)
    try:
        finished = lambda: {e.job_id for e in job_events(settings) if e.kind == JobEventKind.FINISHED}  # noqa: E731
        wait_for(lambda: len(finished()) >= 2, timeout_s=60, what="two jobs to finish")
        source.send_signal(signal.SIGKILL)  # a restart mid-run, wherever its round was
        source.wait(timeout=10)
        source = start_source_process(settings, log)
        wait_for(lambda: finished() >= set(keys), timeout_s=90, what="every job to finish")
        time.sleep(3.0)  # rounds of the restarted source after the last change: nothing new
        assert source.poll() is None, log.read_text()[-2000:]
        assert f"({len(JOBS)} jobs known)" in log.read_text(), "the restarted source read back its records"
    except AssertionError:
        print(diagnosis(settings, slurm_cluster, keys), log.read_text()[-3000:])
        raise
    finally:
        source.terminate()
        source.wait(timeout=20)
        threads.stop_all()
    wall_s = time.monotonic() - t0
    assert not threads.errors, threads.errors

    events = job_events(settings)
    per_job = Counter((e.job_id, e.kind) for e in events)
    for key in keys:
        assert per_job[(key, JobEventKind.SUBMITTED)] == 1, key
        assert per_job[(key, JobEventKind.STARTED)] == 1, key
        assert per_job[(key, JobEventKind.FINISHED)] == 1, key
    assert not [e for e in events if e.kind in (JobEventKind.FAILED, JobEventKind.CANCELLED)]
    accounted = {str(j["job_id"]): j for j in json.loads(slurm_cluster.run(
        "sacct", "--json", "-j", ",".join(str(i) for i in ids.values())).stdout)["jobs"]}  # fmt: skip
    notes = {}
    for name, sid in ids.items():
        assert accounted[str(sid)]["state"]["current"] == "COMPLETED", name
        comment = str(accounted[str(sid)]["comment"]["job"])
        assert comment.startswith("ebbtide: est_gpu_s=") and "| ebbtide-decision: run: " in comment, comment
        notes[name] = comment
    writes = Counter(r.target for r in actuations(settings) if r.outcome == "applied")
    print("decision notes written per job:", dict(writes), "\n" + "\n".join(notes.values()))
    assert sampler.samples > 20
    assert all(gpus <= 16 for gpus in sampler.peak.values()), dict(sampler.peak)
    started = {e.job_id: e.pool for e in events if e.kind == JobEventKind.STARTED}
    assert started[f"e2e-{ids['b1']}"] == "pool-b" and started[f"e2e-{ids['a1']}"] == "pool-a"
    print_timeline(settings, events, keys, t0, wall_s, dict(sampler.peak))


def diagnosis(settings: Settings, slurm: SlurmCluster, keys: dict[str, str]) -> str:
    """What each job's events, state and comment are (printed when the run times out)."""
    events = job_events(settings)
    lines = [f"{keys.get(e.job_id, e.job_id)} {e.kind.value} {e.pool} {e.message}" for e in events]
    lines.append(slurm.run("squeue", "-t", "all", "-o", "%i %j %P %T %r %k", check=False).stdout)
    lines += [f"{r.plan_id} {r.target} {r.action} {r.outcome} {r.error}" for r in actuations(settings)[-30:]]
    return "\n".join(lines)


def actuations(settings: Settings) -> list[ActuationResult]:
    read = read_topic_to_end(settings.kafka.bootstrap_servers, ACTUATIONS, idle_s=0.2,
                             prefix=settings.kafka.topic_prefix)  # fmt: skip
    return [r for r in read if isinstance(r, ActuationResult)]


def job_events(settings: Settings) -> list[JobEvent]:
    read = read_topic_to_end(settings.kafka.bootstrap_servers, JOB_EVENTS, idle_s=0.2,
                             prefix=settings.kafka.topic_prefix)  # fmt: skip
    return [e for e in read if isinstance(e, JobEvent) and e.cluster == "e2e"]


def print_timeline(settings: Settings, events: list[JobEvent], keys: dict[str, str], t0: float,
                   wall_s: float, peak: dict[str, int]) -> None:  # fmt: skip
    """The run's timeline (pytest -s shows it): observed, released, completed, seconds from the start."""
    start = datetime.now(UTC).timestamp() - (time.monotonic() - t0)
    rows = [(e.time.timestamp() - start, keys[e.job_id], e.kind.value, e.pool or "") for e in events]
    released: dict[str, float] = {}
    for r in actuations(settings):
        if r.action == "run" and r.outcome == "applied":
            released.setdefault(r.target.removeprefix("job/"), r.time.timestamp() - start)
    rows += [(at_s, keys.get(job_id, job_id), "released", "") for job_id, at_s in released.items()]
    print(f"\nslurm e2e timeline (wall {wall_s:.1f} s; peak GPUs in use per partition {peak})")
    for at_s, name, what, where in sorted(rows):
        print(f"  {at_s:6.1f} s  {name:4}  {what:9}  {where}")

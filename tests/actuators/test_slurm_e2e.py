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
import signal
import threading
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path

import pytest
from e2e_loop import (
    LOOP_SERVICES,
    Threads,
    actuations,
    assert_each_job_lived_once,
    e2e_settings,
    finished_jobs,
    job_events,
    start_service,
    start_source_process,
    timeline_rows,
)
from prometheus_client import CollectorRegistry
from slurm_cluster import SlurmCluster
from test_slurm_real import wait_for

from actuators.slurm.records import job_gpus, job_phase
from ebbtide.settings import Settings
from schemas import JobEvent, JobEventKind
from streams.metrics import EbbtideMetrics
from streams.topics_admin import ensure_catalogue

pytestmark = [pytest.mark.e2e, pytest.mark.slurm, pytest.mark.kafka, pytest.mark.timeout(300)]

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


def source_env(slurm: SlurmCluster) -> dict[str, str]:
    return {"EBBTIDE_ACTUATOR__SLURM__SLURM_CONF": str(slurm.conf)}


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
    actuator = {"slurm": {"slurm_conf": slurm_cluster.conf}}
    settings = e2e_settings(kafka_broker.bootstrap, topic_prefix, spec, backend="slurm", actuator=actuator)
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
    source = start_source_process(settings, log, source_env(slurm_cluster))
    for name in LOOP_SERVICES:
        start_service(threads, name, settings, kafka_broker.transactions, metrics)
    try:
        finished = lambda: finished_jobs(settings)  # noqa: E731
        wait_for(lambda: len(finished()) >= 2, timeout_s=60, what="two jobs to finish")
        source.send_signal(signal.SIGKILL)  # a restart mid-run, wherever its round was
        source.wait(timeout=10)
        source = start_source_process(settings, log, source_env(slurm_cluster))
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
    assert_each_job_lived_once(events, keys)
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


def print_timeline(settings: Settings, events: list[JobEvent], keys: dict[str, str], t0: float,
                   wall_s: float, peak: dict[str, int]) -> None:  # fmt: skip
    """The run's timeline (pytest -s shows it): observed, released, completed, seconds from the start."""
    start = datetime.now(UTC).timestamp() - (time.monotonic() - t0)
    print(f"\nslurm e2e timeline (wall {wall_s:.1f} s; peak GPUs in use per partition {peak})")
    for at_s, name, what, where in timeline_rows(settings, events, keys, start, "released"):
        print(f"  {at_s:6.1f} s  {name:4}  {what:9}  {where}")

"""ebbtide end to end on a real Kubernetes control plane over a real Apache Kafka broker (e2e, kubernetes).

The cluster: kube-apiserver on etcd, kube-controller-manager (the Job controller), kube-scheduler and
KWOK playing four 8-GPU nodes in two pools (tests/actuators/kube_control_plane.py). A user creates
suspended, labelled Jobs (gangs of 1 to 8 GPUs, two PriorityClasses, one with a deadline) and a
labelled inference Deployment. The source runs as its own ``ebbtide run source`` process; state,
forecaster, optimizer (the ebbtide planner) and actuator (backend ``kubernetes``) as threads, each
built by the wiring from settings as ``ebbtide run <service>`` builds it, on a 4 s step. ebbtide
observes the Jobs, resumes them on a pool, the scheduler binds their pods to KWOK nodes, KWOK
completes the pods after their annotated duration, the Job controller marks the Jobs Complete,
ebbtide sees it and resumes the next. Mid-run the source process is SIGKILLed and the actuator
stopped, and both are started again.
"""

from __future__ import annotations

import json
import signal
import threading
import time
import uuid
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

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
from kube_cluster import ADMIN_TOKEN
from kube_control_plane import COMPLETE_DELAY_ANNOTATION, ControlPlane, gpu_node, wait_for
from prometheus_client import CollectorRegistry

from actuators.kube import api_client
from actuators.kube.events import REASON_HELD, REASON_STARTED
from actuators.kube.jobspec import ANN_DEADLINE, ANN_GPU_HOURS, LABEL_JOB
from actuators.kube.workloads import ANN_DECISION
from ebbtide.settings import Settings
from schemas import JobEventKind
from streams.metrics import EbbtideMetrics
from streams.topics_admin import ensure_catalogue

pytestmark = [pytest.mark.e2e, pytest.mark.kubernetes, pytest.mark.kafka, pytest.mark.timeout(600)]

RUN_S = 4
NODES = {"pool-a": ["a-n0", "a-n1"], "pool-b": ["b-n0", "b-n1"]}
SPEC = """
pools:
  - {name: pool-a, gpu_type: NVIDIA-A100, gpus_total: 16, gpus_available: 16, gpus_per_node: 8}
  - {name: pool-b, gpu_type: NVIDIA-A100, gpus_total: 16, gpus_available: 16, gpus_per_node: 8}
services:
  - spec: {service: chat, gpus_per_replica: 1, min_replicas: 1, max_replicas: 2, allowed_pools: [pool-b]}
    replicas: {pool-b: 1}
"""
# (name, pool or None: any, pods, GPUs per pod, PriorityClass, with a deadline)
JOBS = [
    ("a1", "pool-a", 1, 8, "e2e-low", False),
    ("a2", "pool-a", 2, 4, "e2e-low", False),
    ("a3", "pool-a", 2, 4, "e2e-high", True),
    ("a4", "pool-a", 1, 2, "e2e-low", False),
    ("b1", "pool-b", 1, 8, "e2e-high", False),
    ("b2", "pool-b", 1, 4, "e2e-low", False),
    ("any1", None, 1, 1, "e2e-low", False),
    ("any2", None, 3, 2, "e2e-high", False),
]


def job_manifest(
    name: str, pool: str | None, pods: int, gpus: int, priority: str, deadline: bool
) -> dict[str, Any]:
    annotations = {ANN_GPU_HOURS: f"{pods * gpus * RUN_S / 3600:.6f}"}
    if deadline:
        annotations[ANN_DEADLINE] = (datetime.now(UTC) + timedelta(minutes=10)).isoformat()
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "priorityClassName": priority,
        "containers": [
            {"name": "train", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
        ],
    }
    if pool is not None:
        pod["nodeSelector"] = {"ebbtide.io/pool": pool}
    return {
        "metadata": {"name": name, "labels": {LABEL_JOB: f"e2e-{name}"}, "annotations": annotations},
        "spec": {
            "suspend": True,
            "parallelism": pods,
            "completions": pods,
            "template": {"metadata": {"annotations": {COMPLETE_DELAY_ANNOTATION: f"{RUN_S}s"}}, "spec": pod},
        },
    }


def chat_deployment() -> dict[str, Any]:
    labels = {"app": "chat", "ebbtide.io/service": "chat", "ebbtide.io/pool": "pool-b"}
    container = {"name": "server", "image": "llm", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    return {
        "metadata": {"name": "chat-b", "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "chat"}},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }


def source_env(settings: Settings, namespace: str) -> dict[str, str]:
    return {
        "EBBTIDE_ACTUATOR__KUBERNETES__KUBECONFIG": str(settings.actuator.kubernetes.kubeconfig),
        "EBBTIDE_ACTUATOR__KUBERNETES__NAMESPACES": json.dumps([namespace]),
        "EBBTIDE_ACTUATOR__KUBERNETES__JOBSETS": "false",
    }


class PodSampler:
    """Every 0.3 s, as the API server sees it: GPUs of bound, unfinished pods per pool, and GPUs
    of resumed, unfinished Jobs per pool (what ebbtide committed)."""

    def __init__(self, admin: Any, namespace: str) -> None:
        from kubernetes import client

        self.core, self.batch, self.namespace = client.CoreV1Api(admin), client.BatchV1Api(admin), namespace
        self.pool_of = {n: p for p, nodes in NODES.items() for n in nodes}
        self.peak_bound: dict[str, int] = defaultdict(int)
        self.peak_resumed: dict[str, int] = defaultdict(int)
        self.resumes: Counter[str] = Counter()  # suspend true -> false seen per Job
        self._suspended: dict[str, bool] = {}
        self.samples = 0

    def __call__(self, stop: threading.Event) -> None:
        while not stop.wait(0.3):
            bound: dict[str, int] = defaultdict(int)
            for pod in self.core.list_pod_for_all_namespaces().items:
                if pod.spec.node_name in self.pool_of and pod.status.phase not in {"Succeeded", "Failed"}:
                    limits = pod.spec.containers[0].resources.limits or {}
                    bound[self.pool_of[pod.spec.node_name]] += int(limits.get("nvidia.com/gpu", 0))
            resumed: dict[str, int] = defaultdict(int)
            for job in self.batch.list_namespaced_job(self.namespace).items:
                if self._suspended.get(job.metadata.name) and not job.spec.suspend:
                    self.resumes[job.metadata.name] += 1
                self._suspended[job.metadata.name] = bool(job.spec.suspend)
                done = any(
                    c.type in {"Complete", "Failed"} and c.status == "True"
                    for c in job.status.conditions or []
                )
                if not job.spec.suspend and not done:
                    pool = (job.spec.template.spec.node_selector or {}).get("ebbtide.io/pool", "?")
                    gpus = int(job.spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"])
                    resumed[pool] += gpus * int(job.spec.parallelism or 1)
            for pool, gpus in bound.items():
                self.peak_bound[pool] = max(self.peak_bound[pool], gpus)
            for pool, gpus in resumed.items():
                self.peak_resumed[pool] = max(self.peak_resumed[pool], gpus)
            self.samples += 1


@pytest.fixture
def cluster_world(kube_control_plane: ControlPlane) -> Any:
    from kubernetes import client

    admin = api_client(kube_control_plane.cluster.configuration(ADMIN_TOKEN))
    core, sched = client.CoreV1Api(admin), client.SchedulingV1Api(admin)
    ns = f"e2e-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns}})
    for pool, names in NODES.items():
        for name in names:
            core.create_node(gpu_node(name, pool, gpus=8))
    for name, value in (("e2e-low", 100), ("e2e-high", 5000)):
        sched.create_priority_class({"metadata": {"name": name}, "value": value})
    wait_for(
        "the KWOK nodes Ready and untainted",
        lambda: all(
            not n.spec.taints
            and any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
            for n in core.list_node().items
            if n.metadata.name in {x for names in NODES.values() for x in names}
        ),
    )
    yield admin, ns
    for names in NODES.values():
        for name in names:
            core.delete_node(name)
    for name in ("e2e-low", "e2e-high"):
        sched.delete_priority_class(name)
    core.delete_namespace(ns)


def test_suspended_jobs_are_resumed_completed_and_restarts_change_nothing(
    kube_control_plane: ControlPlane, cluster_world: Any, kafka_broker, topic_prefix: str, tmp_path: Path
) -> None:
    from kubernetes import client

    admin, ns = cluster_world
    batch, apps, core = client.BatchV1Api(admin), client.AppsV1Api(admin), client.CoreV1Api(admin)
    spec = tmp_path / "cluster.yaml"
    spec.write_text(SPEC)
    kubernetes = {"kubeconfig": kube_control_plane.kubeconfig, "namespaces": [ns], "jobsets": False}
    settings = e2e_settings(
        kafka_broker.bootstrap, topic_prefix, spec, backend="kubernetes", actuator={"kubernetes": kubernetes}
    )
    ensure_catalogue(kafka_broker.bootstrap, topic_prefix)
    t0 = time.monotonic()
    apps.create_namespaced_deployment(ns, chat_deployment())
    for name, pool, pods, gpus, priority, deadline in JOBS:
        batch.create_namespaced_job(ns, job_manifest(name, pool, pods, gpus, priority, deadline))
    keys = {f"e2e-{name}": name for name, *_ in JOBS}
    metrics = EbbtideMetrics(CollectorRegistry())
    threads, sampler = Threads(), PodSampler(admin, ns)
    threads.start("sampler", sampler)
    log = tmp_path / "source.log"
    source = start_source_process(settings, log, source_env(settings, ns))
    for name in LOOP_SERVICES:
        start_service(threads, name, settings, kafka_broker.transactions, metrics)

    def finished() -> set[str]:
        return finished_jobs(settings)

    try:
        wait_for("three jobs to finish", lambda: len(finished()) >= 3, timeout_s=90, every_s=0.5)
        # restarts mid-run: the source process SIGKILLed wherever its round was, the actuator stopped;
        # each starts again from what it published
        source.send_signal(signal.SIGKILL)
        source.wait(timeout=10)
        threads.stop("actuator")
        source = start_source_process(settings, log, source_env(settings, ns))
        start_service(threads, "actuator", settings, kafka_broker.transactions, metrics)
        wait_for("every job to finish", lambda: finished() >= set(keys), timeout_s=120, every_s=0.5)
        time.sleep(3.0)  # rounds of the restarted source after the last change: nothing new
        assert source.poll() is None, log.read_text()[-2000:]
        assert f"({len(JOBS)} jobs known)" in log.read_text(), "the restarted source read back its records"
    except AssertionError:
        print(diagnosis(settings, admin, ns, keys), log.read_text()[-3000:])
        raise
    finally:
        source.terminate()
        source.wait(timeout=20)
        threads.stop_all()
    wall_s = time.monotonic() - t0
    assert not threads.errors, threads.errors

    events = job_events(settings)
    assert_each_job_lived_once(events, keys)
    assert sampler.resumes == Counter({name: 1 for name, *_ in JOBS}), (
        f"resumed twice or never: {sampler.resumes}"
    )
    pods = Counter(
        p.metadata.labels["batch.kubernetes.io/job-name"]
        for p in core.list_namespaced_pod(ns, label_selector="batch.kubernetes.io/job-name").items
    )
    for name, _, parallelism, *_ in JOBS:
        assert pods[name] == parallelism, f"{name}: {pods[name]} pods for {parallelism}: run twice"
        job = batch.read_namespaced_job(name, ns)
        assert any(c.type == "Complete" and c.status == "True" for c in job.status.conditions), name
        assert ANN_DECISION in job.metadata.annotations, name
    started_events = [
        e
        for e in core.list_namespaced_event(ns).items
        if e.reason == REASON_STARTED and e.source.component == "ebbtide"
    ]
    assert {e.involved_object.name for e in started_events} == {name for name, *_ in JOBS}
    assert all(e.message for e in started_events), "every Event carries the decision's reason"
    held_events = [e for e in core.list_namespaced_event(ns).items if e.reason == REASON_HELD]
    assert held_events and all(e.message.startswith("held") for e in held_events), [
        e.message for e in held_events
    ]
    started = {e.job_id: e.pool for e in events if e.kind == JobEventKind.STARTED}
    for name, pool, *_ in JOBS:
        assert pool is None or started[f"e2e-{name}"] == pool, (name, started)
    assert sampler.samples > 20
    assert all(gpus <= 16 for gpus in sampler.peak_bound.values()), dict(sampler.peak_bound)
    assert all(gpus <= 16 for gpus in sampler.peak_resumed.values()), dict(sampler.peak_resumed)
    print_timeline(settings, events, keys, t0, wall_s, sampler, started_events)


def diagnosis(settings: Settings, admin: Any, namespace: str, keys: dict[str, str]) -> str:
    from kubernetes import client

    lines = [
        f"{keys.get(e.job_id, e.job_id)} {e.kind.value} {e.pool} {e.message}" for e in job_events(settings)
    ]
    for job in client.BatchV1Api(admin).list_namespaced_job(namespace).items:
        lines.append(f"job {job.metadata.name} suspend={job.spec.suspend} active={job.status.active} "
                     f"conditions={[c.type for c in job.status.conditions or []]}")  # fmt: skip
    for pod in client.CoreV1Api(admin).list_namespaced_pod(namespace).items:
        lines.append(f"pod {pod.metadata.name} node={pod.spec.node_name} phase={pod.status.phase}")
    lines += [f"{r.plan_id} {r.target} {r.action} {r.outcome} {r.error}" for r in actuations(settings)[-30:]]
    return "\n".join(lines)


def print_timeline(settings: Settings, events: list[Any], keys: dict[str, str], t0: float, wall_s: float,
                   sampler: PodSampler, started_events: list[Any]) -> None:  # fmt: skip
    """The run's timeline (pytest -s shows it): observed, resumed, started, completed, from the start."""
    start = datetime.now(UTC).timestamp() - (time.monotonic() - t0)
    print(f"\nkubernetes e2e timeline (wall {wall_s:.1f} s; peak GPUs per pool: bound"
          f" {dict(sampler.peak_bound)}, resumed {dict(sampler.peak_resumed)})")  # fmt: skip
    for at_s, name, what, where in timeline_rows(settings, events, keys, start, "resumed"):
        print(f"  {at_s:6.1f} s  {name:5}  {what:9}  {where}")
    print("  Events: " + "; ".join(f"{e.involved_object.name}: {e.message}" for e in started_events[:3]))

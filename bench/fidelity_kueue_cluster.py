"""The real side of the Kueue fidelity benchmark: the workload as Jobs on a cluster that runs Kueue.

Where it sits: bench/fidelity_kueue.py's counterpart to the simulator run. It talks to the API
server over plain HTTPS (the benchmarks reach Kubernetes' client library only through actuators/,
and these are a few REST calls): it creates Kueue's objects (a ResourceFlavor whose node labels
pin the pods to the benchmark's nodes, a ClusterQueue per team with its nominal quota in one
cohort, with Kueue's preemption settings as the simulated baseline assumes them, a LocalQueue
per team, two WorkloadPriorityClasses), submits each Job suspended with its queue and priority
labels at its step (compressed: ``step_real_s`` wall seconds a step), and polls the Workloads
every 0.1 s for admissions (condition Admitted) and finishes (condition Finished). The pods
complete after the job's run time through KWOK's ``pod-complete.stage.kwok.x-k8s.io/delay``
annotation (tests/actuators/kwok/stages.yaml); on a cluster with real nodes use the pod template's
own command instead. Nothing else on the cluster is touched; ``cleanup`` removes what it made.
"""

from __future__ import annotations

import json
import math
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.fidelity_kueue import (
    NOMINAL_GPUS,
    PRIORITY_VALUE,
    TEAMS,
    WORKLOAD,
    FidelityJob,
    FidelityReport,
    JobTimes,
    Timeline,
    compare,
    simulate,
)

KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
POOL_LABEL = "ebbtide.io/pool"
COMPLETE_DELAY_ANNOTATION = "pod-complete.stage.kwok.x-k8s.io/delay"
GPU = "nvidia.com/gpu"
SETTLE_S = 1.0  # wall seconds Kueue is given, after a job's end, to re-queue and admit what waited for it


@dataclass(frozen=True)
class ApiTarget:
    """Where the API server is and how to authenticate (a bearer token, the CA that signed it)."""

    server: str
    token: str
    ca_file: Path


class Api:
    """The few REST calls the benchmark makes; an HTTP error raises with the server's message."""

    def __init__(self, target: ApiTarget) -> None:
        self.target = target
        self.context = ssl.create_default_context(cafile=str(target.ca_file))

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.target.server + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.target.token}")
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=10) as response:
                result: dict[str, Any] = json.loads(response.read() or b"{}")
                return result
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"{method} {path}: HTTP {exc.code}: {exc.read().decode()[:400]}") from None

    def create(self, path: str, body: dict[str, Any]) -> None:
        self.call("POST", path, body)

    def delete(self, path: str) -> None:
        try:
            self.call("DELETE", path, {"propagationPolicy": "Background"})
        except RuntimeError as exc:
            if "HTTP 404" not in str(exc):
                raise


@dataclass(frozen=True)
class KueueSetup:
    """Names of what the benchmark creates; ``prefix`` keeps repeated runs apart."""

    namespace: str
    pool: str
    prefix: str = "fid"

    def queue(self, team: str) -> str:
        return f"{self.prefix}-{team}"

    def priority(self, name: str) -> str:
        return f"{self.prefix}-{name}"


def kueue_objects(setup: KueueSetup) -> list[tuple[str, dict[str, Any]]]:
    """(collection path, object) for the flavor, the priority classes and each team's queues."""
    flavor = f"{setup.prefix}-gpu"
    objects: list[tuple[str, dict[str, Any]]] = [
        (f"{KUEUE}/resourceflavors", {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": flavor},
            "spec": {"nodeLabels": {POOL_LABEL: setup.pool}},
        }),
    ]  # fmt: skip
    for name, value in PRIORITY_VALUE.items():
        objects.append((f"{KUEUE}/workloadpriorityclasses", {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
            "metadata": {"name": setup.priority(name)}, "value": value,
        }))  # fmt: skip
    for team in TEAMS:
        objects.append((f"{KUEUE}/clusterqueues", cluster_queue(setup, team, flavor)))
        objects.append((f"{KUEUE}/namespaces/{setup.namespace}/localqueues", {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": setup.queue(team), "namespace": setup.namespace},
            "spec": {"clusterQueue": setup.queue(team)},
        }))  # fmt: skip
    return objects


def cluster_queue(setup: KueueSetup, team: str, flavor: str) -> dict[str, Any]:
    """A team's ClusterQueue: nominal GPUs in the shared cohort, BestEffortFIFO, and the preemption
    the simulated baseline assumes (withinClusterQueue: LowerPriority, reclaimWithinCohort: Any)."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": setup.queue(team)},
        "spec": {
            "namespaceSelector": {},
            "cohortName": f"{setup.prefix}-cohort",
            "queueingStrategy": "BestEffortFIFO",
            "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"},
            "resourceGroups": [
                {
                    "coveredResources": [GPU],
                    "flavors": [
                        {"name": flavor, "resources": [{"name": GPU, "nominalQuota": NOMINAL_GPUS[team]}]}
                    ],
                }
            ],
        },
    }


def job_manifest(setup: KueueSetup, job: FidelityJob, step_real_s: float) -> dict[str, Any]:
    """The job as a suspended batch/v1 Job in its team's queue: ``gpus`` pods of one GPU each (a
    gang Kueue admits whole), each completing after the run time."""
    pod = {
        "restartPolicy": "Never",
        "containers": [
            {"name": "work", "image": "example.invalid/train:1", "resources": {"limits": {GPU: "1"}}}
        ],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job.job_id,
            "labels": {
                "kueue.x-k8s.io/queue-name": setup.queue(job.team),
                "kueue.x-k8s.io/priority-class": setup.priority(job.priority),
            },
        },
        "spec": {
            "suspend": True,
            "parallelism": job.gpus,
            "completions": job.gpus,
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {COMPLETE_DELAY_ANNOTATION: f"{job.run_steps * step_real_s:g}s"}},
                "spec": pod,
            },
        },
    }


def install(api: Api, setup: KueueSetup) -> None:
    for path, body in kueue_objects(setup):
        api.create(path, body)


def cleanup(api: Api, setup: KueueSetup, jobs: tuple[FidelityJob, ...] = WORKLOAD) -> None:
    for job in jobs:
        api.delete(f"/apis/batch/v1/namespaces/{setup.namespace}/jobs/{job.job_id}")
    for path, body in reversed(kueue_objects(setup)):
        api.delete(f"{path}/{body['metadata']['name']}")


def _condition(obj: dict[str, Any], kind: str) -> bool:
    return any(
        c["type"] == kind and c["status"] == "True" for c in obj.get("status", {}).get("conditions", [])
    )


def _job_of(workload: dict[str, Any]) -> str | None:
    for owner in workload["metadata"].get("ownerReferences", []):
        if owner.get("kind") == "Job":
            return str(owner["name"])
    return None


@dataclass
class _Watch:
    """What the poller has seen: per job, whether it is admitted now, and its timeline."""

    timeline: Timeline
    admitted: dict[str, bool]
    last_finish: float = -math.inf

    def see(self, workloads: list[dict[str, Any]], step: float) -> None:
        for workload in workloads:
            job_id = _job_of(workload)
            if job_id not in self.timeline:
                continue
            times, now_admitted = self.timeline[job_id], _condition(workload, "Admitted")
            if now_admitted and not self.admitted[job_id]:
                times.starts.append(step)
            self.admitted[job_id] = now_admitted
            if _condition(workload, "Finished") and times.finish is None:
                times.finish = step
                self.last_finish = step

    def overdue(self, step: float, run_steps: dict[str, int]) -> list[str]:
        """Admitted jobs due to end by ``step`` (admitted in step s, due at the boundary s + run, as
        in the simulator) that the cluster has not yet reported Finished."""
        return [
            job_id
            for job_id, times in self.timeline.items()
            if self.admitted[job_id]
            and times.finish is None
            and math.floor(times.starts[-1] + 1e-9) + run_steps[job_id] <= step
        ]


def run_on_kueue(
    api: Api, setup: KueueSetup, *, step_real_s: float, jobs: tuple[FidelityJob, ...] = WORKLOAD,
    timeout_steps: int = 80,
) -> Timeline:  # fmt: skip
    """Submit the jobs at their steps and record admissions and finishes (steps since the start).

    The simulator frees a finished job's GPUs before it decides on the arrivals of the same step;
    on the cluster a job's end reaches Kueue a second or two after its pods complete. So an arrival
    is submitted at its step once no job is overdue (due by then, its Finished not yet seen) and
    SETTLE_S after the last Finished, the time Kueue takes to requeue what waited for those GPUs and
    decide on it: the same order of events, each real admission a little after its step's boundary."""
    install(api, setup)
    watch = _Watch({j.job_id: JobTimes() for j in jobs}, {j.job_id: False for j in jobs})
    pending = sorted(jobs, key=lambda j: (j.submit_step, j.job_id))
    runs = {j.job_id: j.run_steps for j in jobs}
    path = f"{KUEUE}/namespaces/{setup.namespace}/workloads"
    t0 = time.monotonic()
    while True:
        step = (time.monotonic() - t0) / step_real_s
        settled = step - watch.last_finish >= SETTLE_S / step_real_s
        while pending and pending[0].submit_step <= step and settled and not watch.overdue(step, runs):
            job = pending.pop(0)
            api.create(
                f"/apis/batch/v1/namespaces/{setup.namespace}/jobs", job_manifest(setup, job, step_real_s)
            )
        watch.see(api.call("GET", path)["items"], step)
        if not pending and all(t.finish is not None for t in watch.timeline.values()):
            return watch.timeline
        if step > timeout_steps:
            return watch.timeline
        time.sleep(0.1)


def run_fidelity(
    target: ApiTarget, *, namespace: str, pool: str, step_real_s: float, kueue_version: str,
    prefix: str = "fid",
) -> FidelityReport:  # fmt: skip
    """The whole comparison: the simulated baseline, then the same workload on the real Kueue."""
    sim = simulate(WORKLOAD)
    api, setup = Api(target), KueueSetup(namespace=namespace, pool=pool, prefix=prefix)
    try:
        real = run_on_kueue(api, setup, step_real_s=step_real_s)
    finally:
        cleanup(api, setup)
    return compare(sim, real, step_real_s=step_real_s, kueue_version=kueue_version)

"""Small records the Kubernetes source keeps of each object it watches: pure functions of raw JSON.

Place in the loop: the source's reflectors (actuators/kube/reflector.py) hand raw objects to
these functions and keep only what comes back, so its memory grows with what the planner needs,
not with the objects' size. Nothing here does I/O.

- a Node: its pool (label ``ebbtide.io/pool``), GPU type (``nvidia.com/gpu.product``), allocatable
  GPUs, and whether pods can be placed on it (not NotReady, not cordoned, no NoSchedule or
  NoExecute taint; the first reason otherwise), and the maintenance window it announces
  (actuators/kube/maintenance.py);
- a Pod bound to a node and not terminated: its node, GPUs (requests else limits), and the Job
  that owns it (``batch.kubernetes.io/job-name``);
- a batch Job or JobSet that opted in (label ``ebbtide.io/job-id``): its phase, spec (or why it has
  none), placed pool and its last decision annotations;
- a Deployment labelled ``ebbtide.io/service``: service, pool, replicas and GPUs per replica;
- an HPA targeting a Deployment: its bounds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from actuators.kube.jobspec import (
    GPU_RESOURCE,
    LABEL_GPU_PRODUCT,
    LABEL_JOB,
    LABEL_POOL,
    PriorityClassInfo,
    PriorityWeights,
    SpecError,
    job_spec,
    pod_gpus,
)
from actuators.kube.maintenance import NodeWindow, node_window
from schemas import JobSpec

LABEL_SERVICE = "ebbtide.io/service"
LABEL_JOB_NAME = "batch.kubernetes.io/job-name"
LABEL_JOB_NAME_LEGACY = "job-name"
LABEL_JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
ANN_ACTION = "ebbtide.io/action"
ANN_PREEMPTIBLE = "ebbtide.io/preemptible"
BLOCKING_TAINTS = {"NoSchedule", "NoExecute"}

WorkloadPhase = Literal["queued", "running", "finished", "failed", "preempted", "cancelled"]


@dataclass(frozen=True)
class NodeRecord:
    name: str
    pool: str | None
    gpu_type: str
    gpus: int
    schedulable: bool
    reason: str | None
    maintenance: NodeWindow | None = None
    maintenance_error: str | None = None
    """Why the window the node announces cannot be read (the source logs it), or None."""


@dataclass(frozen=True)
class PodRecord:
    namespace: str
    node: str
    gpus: int
    job_name: str | None
    jobset_name: str | None = None

    def owner(self) -> tuple[str, str, str] | None:
        """(kind, namespace, name) of the batch workload this pod runs for, if any."""
        if self.jobset_name:
            return ("JobSet", self.namespace, self.jobset_name)
        return ("Job", self.namespace, self.job_name) if self.job_name else None


@dataclass(frozen=True)
class WorkloadRecord:
    """An opted-in Job or JobSet as the source sees it now."""

    namespace: str
    kind: str
    name: str
    uid: str
    job_id: str
    phase: WorkloadPhase
    spec: JobSpec | None
    error: SpecError | None
    pool: str | None
    message: str | None


@dataclass(frozen=True)
class DeploymentRecord:
    namespace: str
    name: str
    service: str
    pool: str
    replicas: int
    gpus_per_replica: int


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def node_record(
    obj: Mapping[str, Any], pool_label: str = LABEL_POOL, gpu_resource: str = GPU_RESOURCE
) -> NodeRecord:
    meta, spec, status = _meta(obj), obj.get("spec") or {}, obj.get("status") or {}
    labels = meta.get("labels") or {}
    try:
        gpus = int(str((status.get("allocatable") or {}).get(gpu_resource, "0")))
    except ValueError:
        gpus = 0
    reason = None
    ready = [c for c in status.get("conditions") or [] if c.get("type") == "Ready"]
    if not ready or ready[0].get("status") != "True":
        reason = "NotReady"
    elif spec.get("unschedulable"):
        reason = "cordoned"
    else:
        for taint in spec.get("taints") or []:
            if taint.get("effect") in BLOCKING_TAINTS:
                reason = f"taint {taint.get('key')}:{taint.get('effect')}"
                break
    window, window_error = None, None
    try:
        window = node_window(labels, meta.get("annotations") or {})
    except ValueError as exc:
        window_error = str(exc)
    return NodeRecord(
        name=str(meta.get("name")),
        pool=labels.get(pool_label),
        gpu_type=str(labels.get(LABEL_GPU_PRODUCT, "unknown")),
        gpus=max(gpus, 0),
        schedulable=reason is None,
        reason=reason,
        maintenance=window,
        maintenance_error=window_error,
    )


def pod_record(obj: Mapping[str, Any], gpu_resource: str = GPU_RESOURCE) -> PodRecord | None:
    """What a pod holds on its node, or None (not bound, terminated, or asks for no GPU)."""
    meta, spec, status = _meta(obj), obj.get("spec") or {}, obj.get("status") or {}
    node = spec.get("nodeName")
    if not node or status.get("phase") in {"Succeeded", "Failed"} or meta.get("deletionTimestamp"):
        return None
    try:
        gpus = pod_gpus(spec, gpu_resource)
    except Exception:
        return None
    if gpus < 1:
        return None
    labels = meta.get("labels") or {}
    return PodRecord(
        namespace=str(meta.get("namespace")),
        node=str(node),
        gpus=gpus,
        job_name=labels.get(LABEL_JOB_NAME) or labels.get(LABEL_JOB_NAME_LEGACY),
        jobset_name=labels.get(LABEL_JOBSET_NAME),
    )


def _conditions(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {str(c.get("type")): c for c in status.get("conditions") or [] if c.get("status") == "True"}


def workload_phase(obj: Mapping[str, Any]) -> tuple[WorkloadPhase, str | None]:
    """Phase from the Job (or JobSet) conditions, its deletion and spec.suspend, and why."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    conditions = _conditions(status)
    for kind, phase in (("Complete", "finished"), ("Completed", "finished"), ("Failed", "failed")):
        if kind in conditions:
            return phase, conditions[kind].get("message") or conditions[kind].get("reason")  # type: ignore[return-value]
    if _meta(obj).get("deletionTimestamp"):
        return "cancelled", "being deleted"
    if spec.get("suspend"):
        action = (_meta(obj).get("annotations") or {}).get(ANN_ACTION)
        return ("preempted", "suspended by ebbtide") if action == "preempt" else ("queued", None)
    return "running", None


def placed_pool(obj: Mapping[str, Any], pool_label: str = LABEL_POOL) -> str | None:
    spec = obj.get("spec") or {}
    if obj.get("kind") == "JobSet":
        pods = [rj["template"]["spec"]["template"]["spec"] for rj in spec.get("replicatedJobs") or []]
    else:
        pods = [(spec.get("template") or {}).get("spec") or {}]
    pools = {(p.get("nodeSelector") or {}).get(pool_label) for p in pods}
    return pools.pop() if len(pools) == 1 else None


def workload_record(
    obj: Mapping[str, Any],
    priority_classes: Mapping[str, PriorityClassInfo],
    weights: PriorityWeights,
    *,
    pool_label: str = LABEL_POOL,
    gpu_resource: str = GPU_RESOURCE,
) -> WorkloadRecord:
    meta = _meta(obj)
    translated = job_spec(obj, priority_classes, weights, gpu_resource=gpu_resource, pool_label=pool_label)
    phase, message = workload_phase(obj)
    return WorkloadRecord(
        namespace=str(meta.get("namespace")),
        kind=str(obj.get("kind") or "Job"),
        name=str(meta.get("name")),
        uid=str(meta.get("uid")),
        job_id=str((meta.get("labels") or {}).get(LABEL_JOB)),
        phase=phase,
        spec=translated if isinstance(translated, JobSpec) else None,
        error=translated if isinstance(translated, SpecError) else None,
        pool=placed_pool(obj, pool_label),
        message=message,
    )


def deployment_record(
    obj: Mapping[str, Any], pool_label: str = LABEL_POOL, gpu_resource: str = GPU_RESOURCE
) -> DeploymentRecord | None:
    meta, spec = _meta(obj), obj.get("spec") or {}
    labels = meta.get("labels") or {}
    if LABEL_SERVICE not in labels or pool_label not in labels:
        return None
    try:
        per_replica = pod_gpus(((spec.get("template") or {}).get("spec")) or {}, gpu_resource)
    except Exception:
        per_replica = 0
    return DeploymentRecord(
        namespace=str(meta.get("namespace")),
        name=str(meta.get("name")),
        service=str(labels[LABEL_SERVICE]),
        pool=str(labels[pool_label]),
        replicas=int(spec.get("replicas") or 0),
        gpus_per_replica=per_replica,
    )


def hpa_bounds(obj: Mapping[str, Any]) -> tuple[str, str, int, int] | None:
    """(namespace, Deployment name, minReplicas, maxReplicas) of an HPA targeting a Deployment."""
    meta, spec = _meta(obj), obj.get("spec") or {}
    ref = spec.get("scaleTargetRef") or {}
    if ref.get("kind") != "Deployment":
        return None
    return (
        str(meta.get("namespace")),
        str(ref.get("name")),
        int(spec.get("minReplicas") or 1),
        int(spec.get("maxReplicas") or 1),
    )


def priority_class_info(obj: Mapping[str, Any]) -> PriorityClassInfo:
    meta = _meta(obj)
    flag = str((meta.get("annotations") or {}).get(ANN_PREEMPTIBLE, "")).lower()
    return PriorityClassInfo(
        name=str(meta.get("name")),
        value=int(obj.get("value") or 0),
        preemptible={"true": True, "false": False}.get(flag),
    )

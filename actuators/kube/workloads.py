"""Batch workloads the Kubernetes backend drives: batch/v1 Jobs, and JobSets where installed.

Place in the loop: ``KubernetesBackend.observe`` lists them into :class:`BatchWorkload` records
and its plan patches them. Both kinds are handled the same way: ``spec.suspend`` says whether the
workload may run, and every pod template's ``nodeSelector[<pool label>]`` says where (set while
suspended, in the same patch that resumes it, as Kueue does). A JobSet has one pod template per
replicated job; the patch rewrites all of them. The API group ``jobset.x-k8s.io`` answering 404
means JobSets are not installed, which is not an error.

Kueue: a workload labelled ``kueue.x-k8s.io/queue-name`` belongs to Kueue, which flips its
``spec.suspend`` itself; it is left out (never listed, so never suspended or resumed) unless
``include_kueue`` says ebbtide drives those too.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from actuators.base import PermanentError
from actuators.kube.affinity import ANN_AVOIDED, REQUIRED, avoided_of, required_affinity, with_required
from actuators.kube.client import call
from actuators.observation import JobPhase

LABEL_JOB = "ebbtide.io/job-id"
LABEL_KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
ANN_PLAN = "ebbtide.io/plan-id"
ANN_DECISION = "ebbtide.io/decision"
JOBSET_GROUP, JOBSET_VERSION, JOBSET_PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"


@dataclass(frozen=True)
class BatchWorkload:
    kind: str
    job_id: str
    name: str
    phase: JobPhase
    pool: str | None
    gpus: int
    plan_id: str | None
    pod_specs: list[dict[str, Any]]
    patch: Callable[[dict[str, Any]], object]
    raw_spec: dict[str, Any]
    namespace: str = ""
    uid: str | None = None
    decision: tuple[str, str] | None = None
    avoided: tuple[str, ...] = ()  # nodes ebbtide last kept its pods off (actuators/kube/affinity.py)

    def run_body(
        self, pool_label: str, pool: str, meta: dict[str, Any], avoid: Sequence[str] = ()
    ) -> dict[str, Any]:
        """A merge patch that places every pod template on ``pool``, off the ``avoid`` nodes
        (maintenance takes them out before the job would end), and resumes.

        Only scheduling directives of a suspended workload's pod template may change (node
        selector, affinity, tolerations); its PriorityClass is fixed at creation by the submitter.
        """
        annotations = {
            **meta["metadata"].get("annotations", {}),
            ANN_AVOIDED: ",".join(sorted(avoid)) or None,
        }
        meta = {**meta, "metadata": {**meta["metadata"], "annotations": annotations}}
        if self.kind == "Job":
            placed: dict[str, Any] = {"nodeSelector": {pool_label: pool}}
            if avoid or self.avoided:  # a strategic merge patch: None deletes the requirement
                required = required_affinity(self.pod_specs[0], avoid, self.avoided)
                placed["affinity"] = {"nodeAffinity": {REQUIRED: required}}
            return {**meta, "spec": {"suspend": False, "template": {"spec": placed}}}
        replicated = copy.deepcopy(self.raw_spec.get("replicatedJobs") or [])
        for rj in replicated:
            pod_spec = rj["template"]["spec"]["template"]["spec"]
            pod_spec["nodeSelector"] = {**(pod_spec.get("nodeSelector") or {}), pool_label: pool}
            if avoid or self.avoided:
                required = required_affinity(pod_spec, avoid, self.avoided)
                affinity = with_required(pod_spec.pop("affinity", None) or {}, required)
                pod_spec.update({"affinity": affinity} if affinity else {})
        return {**meta, "spec": {"suspend": False, "replicatedJobs": replicated}}


def _job_patcher(
    batch: client.BatchV1Api, name: str, namespace: str, timeout_s: float
) -> Callable[[dict[str, Any]], object]:
    def patch(body: dict[str, Any]) -> object:
        return call(
            "patch job", lambda: batch.patch_namespaced_job(name, namespace, body, _request_timeout=timeout_s)
        )

    return patch


def _jobset_patcher(
    custom: client.CustomObjectsApi, name: str, namespace: str, timeout_s: float
) -> Callable[[dict[str, Any]], object]:
    def patch(body: dict[str, Any]) -> object:
        return call(
            "patch jobset",
            lambda: custom.patch_namespaced_custom_object(
                JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSET_PLURAL, name, body, _request_timeout=timeout_s
            ),
        )

    return patch


def _gpus(pod_spec: dict[str, Any], resource: str) -> int:
    total = 0
    for container in pod_spec.get("containers") or []:
        limits = (container.get("resources") or {}).get("limits") or {}
        total += int(limits.get(resource, 0))
    return total


def _phase(suspended: bool, conditions: list[dict[str, Any]], active: int) -> JobPhase:
    for cond in conditions:
        if cond.get("status") == "True" and cond.get("type") in {"Complete", "Completed"}:
            return "finished"
        if cond.get("status") == "True" and cond.get("type") == "Failed":
            return "failed"
    if suspended:
        return "held"
    return "running" if active > 0 else "pending"


def last_decision(meta: dict[str, Any]) -> tuple[str, str] | None:
    """(action, reason) of the ``ebbtide.io/decision`` annotation, or None (absent or unreadable)."""
    raw = (meta.get("annotations") or {}).get(ANN_DECISION)
    try:
        note = json.loads(raw) if raw else None
        return (str(note["action"]), str(note["reason"])) if isinstance(note, dict) else None
    except (ValueError, KeyError):
        return None


def decision_note(plan_id: str, action: str, reason: str) -> str:
    """The ``ebbtide.io/decision`` annotation's value: which plan decided what, and why (JSON)."""
    return json.dumps({"plan_id": plan_id, "action": action, "reason": reason[:500]}, sort_keys=True)


def _selected(meta: dict[str, Any], include_kueue: bool) -> bool:
    return include_kueue or LABEL_KUEUE_QUEUE not in (meta.get("labels") or {})


def list_jobs(
    api: client.ApiClient,
    namespace: str,
    pool_label: str,
    gpu_resource: str,
    timeout_s: float,
    include_kueue: bool = False,
) -> list[BatchWorkload]:
    batch = client.BatchV1Api(api)
    items = call(
        "list jobs",
        lambda: batch.list_namespaced_job(namespace, label_selector=LABEL_JOB, _request_timeout=timeout_s),
    ).items
    out = []
    for job in items:
        raw = api.sanitize_for_serialization(job)  # type: ignore[no-untyped-call]
        spec, status, meta = raw.get("spec") or {}, raw.get("status") or {}, raw.get("metadata") or {}
        if not _selected(meta, include_kueue):
            continue
        pod_spec = spec["template"]["spec"]
        name = meta["name"]
        out.append(
            BatchWorkload(
                kind="Job",
                job_id=meta["labels"][LABEL_JOB],
                name=name,
                phase=_phase(
                    bool(spec.get("suspend")), status.get("conditions") or [], int(status.get("active") or 0)
                ),
                pool=(pod_spec.get("nodeSelector") or {}).get(pool_label),
                gpus=_gpus(pod_spec, gpu_resource) * int(spec.get("parallelism") or 1),
                plan_id=(meta.get("annotations") or {}).get(ANN_PLAN),
                pod_specs=[pod_spec],
                raw_spec=spec,
                patch=_job_patcher(batch, name, namespace, timeout_s),
                namespace=namespace,
                uid=meta.get("uid"),
                decision=last_decision(meta),
                avoided=avoided_of(meta),
            )
        )
    return out


def list_jobsets(
    api: client.ApiClient,
    namespace: str,
    pool_label: str,
    gpu_resource: str,
    timeout_s: float,
    include_kueue: bool = False,
) -> list[BatchWorkload]:
    custom = client.CustomObjectsApi(api)
    try:
        listing: Any = call(
            "list jobsets",
            lambda: custom.list_namespaced_custom_object(
                JOBSET_GROUP,
                JOBSET_VERSION,
                namespace,
                JOBSET_PLURAL,
                label_selector=LABEL_JOB,
                _request_timeout=timeout_s,
            ),
        )
    except PermanentError as exc:
        if "HTTP 404" in str(exc):
            return []  # JobSet is not installed in this cluster
        raise
    out = []
    for obj in listing.get("items") or []:
        spec, status, meta = obj.get("spec") or {}, obj.get("status") or {}, obj.get("metadata") or {}
        if not _selected(meta, include_kueue):
            continue
        pod_specs = [rj["template"]["spec"]["template"]["spec"] for rj in spec.get("replicatedJobs") or []]
        gpus = sum(
            _gpus(rj["template"]["spec"]["template"]["spec"], gpu_resource)
            * int(rj.get("replicas") or 1)
            * int(rj["template"]["spec"].get("parallelism") or 1)
            for rj in spec.get("replicatedJobs") or []
        )
        pools = {(p.get("nodeSelector") or {}).get(pool_label) for p in pod_specs}
        active = sum(int(r.get("active") or 0) for r in status.get("replicatedJobsStatus") or [])
        name = meta["name"]
        out.append(
            BatchWorkload(
                kind="JobSet",
                job_id=meta["labels"][LABEL_JOB],
                name=name,
                phase=_phase(bool(spec.get("suspend")), status.get("conditions") or [], active),
                pool=pools.pop() if len(pools) == 1 else None,
                gpus=gpus,
                plan_id=(meta.get("annotations") or {}).get(ANN_PLAN),
                pod_specs=pod_specs,
                raw_spec=spec,
                patch=_jobset_patcher(custom, name, namespace, timeout_s),
                namespace=namespace,
                uid=meta.get("uid"),
                decision=last_decision(meta),
                avoided=avoided_of(meta),
            )
        )
    return out

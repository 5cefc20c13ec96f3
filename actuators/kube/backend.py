"""The Kubernetes backend: Deployments (or their HPA's bounds) for inference, suspended Jobs for batch.

Place in the loop: a ``Backend`` for the ``Actuator`` engine, talking to one namespace through
the official client. How an Allocation maps onto Kubernetes objects:

- service capacity ``(service, pool, replicas)``: the Deployment labelled
  ``ebbtide.io/service=<service>, ebbtide.io/pool=<pool>``. Without an HPA its scale subresource
  is set to ``replicas``. When an HPA targets it, the actuator never touches the replica count
  (that would fight the HPA): it moves the HPA's ``minReplicas`` to the planned capacity (at
  least 1) and lifts ``maxReplicas`` to at least that plus the decision's ``burst_gpus`` in
  replicas; the HPA may add replicas above the plan up to there, and the scheduler makes room by
  preempting lower-priority pods (the borrowers: Jobs marked ``ebbtide.io/borrows-from``).
- job ``run``: the Job (or JobSet) labelled ``ebbtide.io/job-id=<job_id>`` is placed on the pool
  (every pod template's ``nodeSelector[<pool label>] = <pool>``) and resumed
  (``spec.suspend: false``) in one patch, while suspended, as Kueue does. Its PriorityClass is
  the submitter's (a pod template's priority is immutable); deploy/rbac/priorityclasses.yaml has
  the two classes that make the node-level scheduler agree with the plan.
- job ``hold``: a Job not started yet is suspended.
- job ``preempt``: the Job gets the checkpoint request annotation, the engine waits the grace
  period once for all preempted jobs, then ``spec.suspend: true`` (the job controller stops its
  pods with their own termination grace period).
- every object the actuator changes carries ``ebbtide.io/plan-id``, ``ebbtide.io/action`` and
  ``ebbtide.io/reason`` annotations saying which plan decided what.
- decisions where users look: each Job or JobSet held, preempted or started carries
  ``ebbtide.io/decision`` (JSON: plan id, action, reason) and gets a Kubernetes Event
  (``EbbtideStarted`` / ``EbbtideHeld`` / ``EbbtidePreempted``, message: the Allocation's reason),
  the annotation when the (action, reason) differs from the one it holds, the Event only when they
  differ in words (events.in_words: figures masked), so a decision repeated step after step with
  its numbers moved (a running job's GPU-hours left) makes no new Event.
- Kueue: a workload labelled ``kueue.x-k8s.io/queue-name`` is Kueue's and is left alone unless
  ``include_kueue`` (workloads.py).
- namespaces: one or several; Deployments and Jobs are looked up in each.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from typing import Any

from kubernetes import client

from actuators.base import PHASE_PREEMPT, PHASE_SERVICES, ActuationError, Change
from actuators.kube.client import call
from actuators.kube.events import REASON_OF_ACTION, in_words, record_event
from actuators.kube.workloads import (
    ANN_DECISION,
    ANN_PLAN,
    LABEL_JOB,
    BatchWorkload,
    decision_note,
    list_jobs,
    list_jobsets,
)
from actuators.observation import Observation, ObservedJob, ObservedService, service_key
from schemas import Allocation, JobAction, JobDecision, ServiceDecision
from schemas.targets import job_target, service_target

LABEL_SERVICE = "ebbtide.io/service"
LABEL_POOL = "ebbtide.io/pool"
ANN_ACTION = "ebbtide.io/action"
ANN_REASON = "ebbtide.io/reason"
ANN_CHECKPOINT = "ebbtide.io/checkpoint-requested-at"
ANN_BORROWS = "ebbtide.io/borrows-from"
log = logging.getLogger(__name__)


def _annotations(allocation: Allocation, action: str, reason: str) -> dict[str, str]:
    return {ANN_PLAN: allocation.plan_id, ANN_ACTION: action, ANN_REASON: reason[:500]}


class KubernetesBackend:
    name = "kubernetes"

    def __init__(
        self,
        api: client.ApiClient,
        *,
        cluster: str,
        namespace: str | Sequence[str],
        pool_label: str = LABEL_POOL,
        gpu_resource: str = "nvidia.com/gpu",
        checkpoint_grace_s: float = 30.0,
        jobsets: bool = True,
        request_timeout_s: float = 10.0,
        include_kueue: bool = False,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        if checkpoint_grace_s < 0:
            raise ValueError(f"checkpoint_grace_s: must be >= 0, got {checkpoint_grace_s}")
        self.apps = client.AppsV1Api(api)
        self.api = api
        self.autoscaling = client.AutoscalingV2Api(api)
        self.core = client.CoreV1Api(api)
        self.cluster = cluster
        self.namespaces = [namespace] if isinstance(namespace, str) else list(namespace)
        if not self.namespaces:
            raise ValueError("namespace: at least one workload namespace")
        self.namespace = ", ".join(self.namespaces)
        self.include_kueue = include_kueue
        self.pool_label = pool_label
        self.gpu_resource = gpu_resource
        self.checkpoint_grace_s = checkpoint_grace_s
        self.jobsets = jobsets
        self.timeout = request_timeout_s
        self._clock = clock
        self._deployments: dict[str, Any] = {}
        self._hpas: dict[str, Any] = {}
        self._jobs: dict[str, BatchWorkload] = {}

    # -- observe ---------------------------------------------------------------------------

    def observe(self) -> Observation:
        t = self.timeout
        deployments: list[Any] = []
        hpas: list[Any] = []
        workloads: list[BatchWorkload] = []
        for ns in self.namespaces:
            deployments += self._list(
                "list deployments", self.apps.list_namespaced_deployment, ns, label_selector=LABEL_SERVICE
            )
            hpas += self._list("list HPAs", self.autoscaling.list_namespaced_horizontal_pod_autoscaler, ns)
            args = (self.api, ns, self.pool_label, self.gpu_resource, t, self.include_kueue)
            workloads += list_jobs(*args)
            if self.jobsets:
                workloads += list_jobsets(*args)
        nodes: list[Any] = call(
            "list nodes", lambda: self.core.list_node(label_selector=self.pool_label, _request_timeout=t)
        ).items

        self._jobs = {w.job_id: w for w in workloads}
        services = self._observe_services(deployments, hpas)
        observed_jobs = {
            w.job_id: ObservedJob(
                job_id=w.job_id,
                backend_id=f"{w.namespace}/{w.kind.lower()}/{w.name}",
                phase=w.phase,
                pool=w.pool,
                gpus=w.gpus,
                plan_id=w.plan_id,
            )
            for w in workloads
        }
        total, free = self._gpus(nodes, observed_jobs, services)
        return Observation(
            cluster=self.cluster,
            backend=self.name,
            time=self._clock(),
            jobs=observed_jobs,
            services=services,
            gpus_total=total,
            gpus_free=free,
        )

    def _list(self, what: str, fn: Callable[..., Any], namespace: str, **kwargs: Any) -> list[Any]:
        return list(call(what, lambda: fn(namespace, _request_timeout=self.timeout, **kwargs)).items)

    def _observe_services(self, deployments: list[Any], hpas: list[Any]) -> dict[str, ObservedService]:
        """The labelled Deployments as services (kept, with their HPAs, for planning)."""
        self._deployments, self._hpas = {}, {}
        services: dict[str, ObservedService] = {}
        for dep in deployments:
            labels = dep.metadata.labels or {}
            if LABEL_POOL not in labels:
                continue
            key = service_key(labels[LABEL_SERVICE], labels[LABEL_POOL])
            self._deployments[key] = dep
            services[key] = ObservedService(
                service=labels[LABEL_SERVICE],
                pool=labels[LABEL_POOL],
                replicas=int(dep.spec.replicas or 0),
                gpus=float(int(dep.spec.replicas or 0) * self._pod_gpus(dep.spec.template)),
                plan_id=(dep.metadata.annotations or {}).get(ANN_PLAN),
            )
        for hpa in hpas:
            ref = hpa.spec.scale_target_ref
            if ref.kind == "Deployment":
                self._hpas[f"{hpa.metadata.namespace}/{ref.name}"] = hpa
        return services

    def _gpus(
        self, nodes: list[Any], jobs: dict[str, ObservedJob], services: dict[str, ObservedService]
    ) -> tuple[dict[str, int], dict[str, int]]:
        """GPUs per pool: allocatable on its labelled nodes, and what running jobs and services leave."""
        total: dict[str, int] = {}
        for node in nodes:
            pool = (node.metadata.labels or {}).get(self.pool_label)
            if pool is None:
                continue
            gpus = int((node.status.allocatable or {}).get(self.gpu_resource, "0") if node.status else 0)
            total[pool] = total.get(pool, 0) + gpus
        used: dict[str, int] = {}
        for seen in jobs.values():
            if seen.phase == "running" and seen.pool is not None:
                used[seen.pool] = used.get(seen.pool, 0) + seen.gpus
        for svc in services.values():
            used[svc.pool] = used.get(svc.pool, 0) + int(svc.gpus)
        free = {pool: max(total[pool] - used.get(pool, 0), 0) for pool in total}
        return total, free

    def _pod_gpus(self, template: Any) -> int:
        gpus = 0
        for container in (template.spec.containers or []) if template and template.spec else []:
            limits = (container.resources.limits or {}) if container.resources else {}
            gpus += int(limits.get(self.gpu_resource, 0))
        return gpus

    # -- plan ------------------------------------------------------------------------------

    def plan(self, allocation: Allocation, observed: Observation) -> Sequence[Change]:
        changes = [self._plan_service(allocation, s) for s in allocation.services]
        return changes + [self._plan_job(allocation, j, observed) for j in allocation.jobs]

    def _plan_service(self, allocation: Allocation, decision: ServiceDecision) -> Change:
        target = service_target(decision.service, decision.pool)
        dep = self._deployments.get(service_key(decision.service, decision.pool))
        if dep is None:
            return Change(
                target=target,
                action="scale",
                detail="no Deployment",
                phase=PHASE_SERVICES,
                skip_reason=f"no Deployment labelled {LABEL_SERVICE}={decision.service},"
                f" {LABEL_POOL}={decision.pool} in {self.namespace}",
            )
        name, ns, t = dep.metadata.name, dep.metadata.namespace, self.timeout
        meta = {"metadata": {"annotations": _annotations(allocation, "scale", decision.reason)}}
        hpa = self._hpas.get(f"{ns}/{name}")
        if hpa is not None:
            low = max(decision.replicas, 1)
            burst = math.ceil(decision.burst_gpus / max(self._pod_gpus(dep.spec.template), 1) - 1e-9)
            high = max(int(hpa.spec.max_replicas), low + burst)
            if int(hpa.spec.min_replicas or 1) == low and int(hpa.spec.max_replicas) == high:
                return Change(target=target, action="hpa-bounds", detail="matches", phase=PHASE_SERVICES)
            body = {**meta, "spec": {"minReplicas": low, "maxReplicas": high}}
            hpa_name = hpa.metadata.name
            return Change(
                target=target,
                action="hpa-bounds",
                detail=f"HPA {hpa_name}: min {low}, max {high}",
                phase=PHASE_SERVICES,
                execute=lambda: call(
                    "patch HPA",
                    lambda: self.autoscaling.patch_namespaced_horizontal_pod_autoscaler(
                        hpa_name, ns, body, _request_timeout=t
                    ),
                ),
            )
        if int(dep.spec.replicas or 0) == decision.replicas:
            return Change(target=target, action="scale", detail="matches", phase=PHASE_SERVICES)

        def scale() -> None:
            call(
                "patch deployment scale",
                lambda: self.apps.patch_namespaced_deployment_scale(
                    name, ns, {"spec": {"replicas": decision.replicas}}, _request_timeout=t
                ),
            )
            call(
                "annotate deployment",
                lambda: self.apps.patch_namespaced_deployment(name, ns, meta, _request_timeout=t),
            )

        return Change(
            target=target,
            action="scale",
            execute=scale,
            phase=PHASE_SERVICES,
            detail=f"Deployment {name}: {dep.spec.replicas} -> {decision.replicas} replicas",
        )

    def _plan_job(self, allocation: Allocation, decision: JobDecision, observed: Observation) -> Change:
        target = job_target(decision.job_id)
        action = decision.action.value
        seen = observed.jobs.get(decision.job_id)
        job = self._jobs.get(decision.job_id)
        if seen is None or job is None:
            return Change(
                target=target,
                action=action,
                detail="unknown",
                skip_reason=f"no Job or JobSet labelled {LABEL_JOB}={decision.job_id} in {self.namespace}",
            )
        if seen.phase in {"finished", "failed", "cancelled"}:
            return Change(target=target, action=action, detail=seen.phase, skip_reason=f"job is {seen.phase}")
        meta = {"annotations": _annotations(allocation, action, decision.reason)}
        meta["annotations"][ANN_DECISION] = decision_note(allocation.plan_id, action, decision.reason)
        if decision.borrows_from is not None:
            meta["annotations"][ANN_BORROWS] = decision.borrows_from
        return self._shown(self._job_change(target, decision, seen, job, meta), decision, job, meta)

    def _shown(
        self, change: Change, decision: JobDecision, job: BatchWorkload, meta: dict[str, Any]
    ) -> Change:
        """The change, also noting the decision on the workload when it changed: the annotation, and an
        Event where it changed in words (``in_words``), not only in its figures."""
        action, reason = decision.action.value, decision.reason
        if change.skip_reason is not None or job.decision == (action, reason):
            return change
        last = job.decision
        new_in_words = last is None or (last[0], in_words(last[1])) != (action, in_words(reason))

        def show() -> None:
            try:
                record_event(
                    self.core,
                    namespace=job.namespace,
                    kind=job.kind,
                    name=job.name,
                    uid=job.uid,
                    reason=REASON_OF_ACTION[action],
                    message=reason,
                    timeout_s=self.timeout,
                )
            except ActuationError as exc:  # the decision stands; only its Event is missing
                log.warning("event for %s/%s: %s", job.namespace, job.name, exc)

        applied = change.execute
        if applied is None:
            note = {"metadata": {"annotations": {ANN_DECISION: meta["annotations"][ANN_DECISION]}}}
            applied = partial(job.patch, note)
            change = replace(change, detail=f"{change.detail}; decision noted")

        def apply_and_show() -> None:
            applied()
            if new_in_words:  # else the same decision with its figures moved: the annotation has them
                show()

        return replace(change, execute=apply_and_show)

    def _job_change(
        self, target: str, decision: JobDecision, seen: ObservedJob, job: BatchWorkload, meta: dict[str, Any]
    ) -> Change:
        action = decision.action.value

        def patch(body: dict[str, Any]) -> Callable[[], object]:
            return partial(job.patch, body)

        if decision.action == JobAction.RUN:
            return self._plan_run(target, decision, seen, job, meta)
        if decision.action == JobAction.HOLD:
            if seen.phase == "held":
                return Change(target=target, action=action, detail="suspended")
            if seen.phase == "running":
                return Change(
                    target=target,
                    action=action,
                    detail="running",
                    skip_reason="hold applies to waiting jobs; preempt stops a running one",
                )
            return Change(
                target=target,
                action=action,
                detail="suspend before start",
                execute=patch({"metadata": meta, "spec": {"suspend": True}}),
            )
        if seen.phase == "held":
            return Change(target=target, action=action, detail="suspended", phase=PHASE_PREEMPT)
        stamp = self._clock().isoformat()
        return Change(
            target=target,
            action=action,
            detail="checkpoint, then suspend",
            phase=PHASE_PREEMPT,
            prepare=patch({"metadata": {"annotations": {ANN_CHECKPOINT: stamp}}}),
            grace_s=self.checkpoint_grace_s if seen.phase == "running" else 0.0,
            execute=patch({"metadata": meta, "spec": {"suspend": True}}),
        )

    def _plan_run(
        self, target: str, decision: JobDecision, seen: ObservedJob, job: BatchWorkload, meta: dict[str, Any]
    ) -> Change:
        """Run: a suspended workload is placed on the pool and resumed; a started one stays."""
        if seen.phase != "held":
            if seen.pool == decision.pool:
                return Change(target=target, action="run", detail="resumed in pool")
            return Change(
                target=target,
                action="run",
                detail="started elsewhere",
                skip_reason=f"started in pool {seen.pool}; a started job moves only after a preempt",
            )
        body = job.run_body(
            self.pool_label,
            str(decision.pool),
            {"metadata": {**meta, "labels": {LABEL_POOL: str(decision.pool)}}},
            decision.avoid_nodes,
        )
        detail = f"place on {decision.pool}, resume"
        if decision.avoid_nodes:
            detail += f" off {', '.join(decision.avoid_nodes)} (maintenance, or held for a heavier gang)"
        return Change(target=target, action="run", detail=detail, execute=partial(job.patch, body))


__all__ = ["KubernetesBackend"]

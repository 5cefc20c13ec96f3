"""From a Kubernetes batch Job or JobSet (as plain JSON) to the planner's JobSpec: a pure translation.

Place in the loop: the Kubernetes source (actuators/kube/source.py) calls :func:`job_spec` on each
opted-in workload it lists or watches; what comes back is a ``JobSpec`` to publish, or a
:class:`SpecError` naming the annotation (or field) that is wrong, which the source reports as a
Kubernetes Event on the workload and does not plan. Nothing here does I/O.

What the spec is made of (the README's "Run ebbtide on your Kubernetes cluster" lists the same):

- job id: the label ``ebbtide.io/job-id``.
- gang: GPUs per pod (the ``nvidia.com/gpu`` request, else limit, summed over containers) times
  ``parallelism``; a JobSet sums that over its replicated jobs times their ``replicas``.
- allowed pools / GPU types: ``ebbtide.io/pool`` and ``nvidia.com/gpu.product`` in the pod
  template's ``nodeSelector`` or in its required node affinity (``In`` expressions).
- priority: the pod template's ``priorityClassName``; its weight is the PriorityClass ``value``
  through :class:`PriorityWeights`; not preemptible when the PriorityClass is annotated
  ``ebbtide.io/preemptible: "false"``, unless the workload's own annotation says otherwise.
- annotations ``ebbtide.io/<name>`` (see ``ANNOTATIONS``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from schemas import JobSpec
from schemas.bounds import MAX_DURATION_S, MAX_GANG_GPUS, MAX_GPU_SECONDS

LABEL_JOB = "ebbtide.io/job-id"
LABEL_POOL = "ebbtide.io/pool"
LABEL_GPU_PRODUCT = "nvidia.com/gpu.product"
LABEL_KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
GPU_RESOURCE = "nvidia.com/gpu"

ANN_GPU_HOURS = "ebbtide.io/estimated-gpu-hours"
ANN_DEADLINE = "ebbtide.io/deadline"
ANN_CHECKPOINT_INTERVAL = "ebbtide.io/checkpoint-interval-s"
ANN_RESTART_COST = "ebbtide.io/restart-cost-s"
ANN_TEAM = "ebbtide.io/team"
ANN_PREEMPTIBLE = "ebbtide.io/preemptible"

ANNOTATIONS: Mapping[str, str] = {
    ANN_GPU_HOURS: "required: estimated GPU-hours of the whole gang (GPUs x wall hours), > 0",
    ANN_DEADLINE: "optional: RFC 3339 time with an offset (2026-12-02T06:00:00Z) to finish by",
    ANN_CHECKPOINT_INTERVAL: "optional: wall seconds between the job's checkpoints, > 0 (absent: never)",
    ANN_RESTART_COST: "optional: wall seconds a restart costs before new work (loading, warm-up), >= 0",
    ANN_TEAM: "optional: team or queue the job is counted under (default 'default')",
    ANN_PREEMPTIBLE: "optional: 'true' or 'false' (default: the PriorityClass's, else true)",
}


@dataclass(frozen=True)
class SpecError:
    """Why a workload cannot be planned: the annotation or field at fault, and what is wrong."""

    job_id: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@dataclass(frozen=True)
class PriorityClassInfo:
    name: str
    value: int
    preemptible: bool | None = None


@dataclass(frozen=True)
class PriorityWeights:
    """PriorityClass value -> priority weight: the weight of the highest threshold at or below it.

    ``thresholds`` are ``(min_value, weight)`` pairs; a value below every threshold (or a Job with
    no PriorityClass) gets ``default_weight``.
    """

    thresholds: Sequence[tuple[int, float]] = ((1_000, 2.0), (100_000, 4.0))
    default_weight: float = 1.0

    def weight(self, value: int | None) -> float:
        chosen = self.default_weight
        for minimum, weight in sorted(self.thresholds):
            if value is not None and value >= minimum:
                chosen = weight
        return chosen


class _Invalid(Exception):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _quantity(value: Any, field: str) -> int:
    try:
        number = float(str(value))
    except ValueError:
        raise _Invalid(field, f"not a whole number of GPUs: {value!r}") from None
    if not math.isfinite(number) or number < 0 or number != int(number):
        raise _Invalid(field, f"not a whole number of GPUs: {value!r}")
    return int(number)


def pod_gpus(pod_spec: Mapping[str, Any], resource: str = GPU_RESOURCE) -> int:
    """GPUs one pod asks for: per container its request (or, without one, its limit), summed."""
    total = 0
    for container in pod_spec.get("containers") or []:
        resources = container.get("resources") or {}
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        if resource in requests:
            total += _quantity(requests[resource], f"resources.requests[{resource}]")
        elif resource in limits:
            total += _quantity(limits[resource], f"resources.limits[{resource}]")
    return total


def _pod_templates(kind: str, spec: Mapping[str, Any]) -> list[tuple[Mapping[str, Any], int]]:
    """Each pod template's spec with how many pods of it run at once (parallelism x replicas)."""
    if kind == "Job":
        return [(spec["template"]["spec"], int(spec.get("parallelism") or 1))]
    out = []
    for rj in spec.get("replicatedJobs") or []:
        job_spec_ = rj["template"]["spec"]
        out.append(
            (
                job_spec_["template"]["spec"],
                int(job_spec_.get("parallelism") or 1) * int(rj.get("replicas") or 1),
            )
        )
    return out


def _affinity_values(pod_spec: Mapping[str, Any], key: str) -> set[str]:
    node_affinity = (pod_spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    values: set[str] = set()
    for term in required.get("nodeSelectorTerms") or []:
        for expr in term.get("matchExpressions") or []:
            if expr.get("key") == key and expr.get("operator") == "In":
                values.update(str(v) for v in expr.get("values") or [])
    return values


def allowed_values(pod_specs: Sequence[Mapping[str, Any]], key: str) -> list[str]:
    """Values of node label ``key`` every pod template allows (nodeSelector or affinity ``In``)."""
    allowed: set[str] | None = None
    for pod_spec in pod_specs:
        here = _affinity_values(pod_spec, key)
        selected = (pod_spec.get("nodeSelector") or {}).get(key)
        if selected is not None:
            here = {str(selected)} if not here or selected in here else set()
        if here:
            allowed = here if allowed is None else allowed & here
    return sorted(allowed or [])


def _number(annotations: Mapping[str, str], key: str, *, positive: bool, upper: float) -> float | None:
    if key not in annotations:
        return None
    try:
        value = float(annotations[key])
    except ValueError:
        raise _Invalid(key, f"not a number: {annotations[key]!r}") from None
    low_ok = value > 0 if positive else value >= 0
    if not math.isfinite(value) or not low_ok or value > upper:
        bound = "> 0" if positive else ">= 0"
        raise _Invalid(key, f"must be {bound} and at most {upper:g}, got {annotations[key]!r}")
    return value


def _deadline(annotations: Mapping[str, str]) -> datetime | None:
    raw = annotations.get(ANN_DEADLINE)
    if raw is None:
        return None
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise _Invalid(ANN_DEADLINE, f"not an RFC 3339 time: {raw!r}") from None
    if parsed.tzinfo is None:
        raise _Invalid(ANN_DEADLINE, f"needs a UTC offset (e.g. Z): {raw!r}")
    return parsed.astimezone(UTC)


def _preemptible(annotations: Mapping[str, str], pc: PriorityClassInfo | None) -> bool:
    raw = annotations.get(ANN_PREEMPTIBLE)
    if raw is None:
        return pc.preemptible if pc is not None and pc.preemptible is not None else True
    if raw.lower() not in {"true", "false"}:
        raise _Invalid(ANN_PREEMPTIBLE, f"must be 'true' or 'false', got {raw!r}")
    return raw.lower() == "true"


def _gang(kind: str, spec: Mapping[str, Any], resource: str) -> tuple[int, list[Mapping[str, Any]]]:
    templates = _pod_templates(kind, spec)
    gpus = sum(pod_gpus(pod_spec, resource) * pods for pod_spec, pods in templates)
    if gpus < 1:
        raise _Invalid(f"resources[{resource}]", "the pods request no GPU: nothing for ebbtide to plan")
    if gpus > MAX_GANG_GPUS:
        raise _Invalid(f"resources[{resource}]", f"gang of {gpus} GPUs is over {MAX_GANG_GPUS}")
    return gpus, [pod_spec for pod_spec, _ in templates]


def job_spec(
    obj: Mapping[str, Any],
    priority_classes: Mapping[str, PriorityClassInfo],
    weights: PriorityWeights = PriorityWeights(),
    *,
    gpu_resource: str = GPU_RESOURCE,
    pool_label: str = LABEL_POOL,
) -> JobSpec | SpecError:
    """The JobSpec of an opted-in Job or JobSet, or the first thing wrong with it."""
    meta = obj.get("metadata") or {}
    job_id = str((meta.get("labels") or {}).get(LABEL_JOB, ""))
    annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
    try:
        gpus, pod_specs = _gang(str(obj.get("kind") or "Job"), obj.get("spec") or {}, gpu_resource)
        gpu_hours = _number(annotations, ANN_GPU_HOURS, positive=True, upper=MAX_GPU_SECONDS / 3600)
        if gpu_hours is None:
            raise _Invalid(ANN_GPU_HOURS, "missing: the planner needs the estimated GPU-hours")
        class_name = pod_specs[0].get("priorityClassName")
        pc = priority_classes.get(str(class_name)) if class_name else None
        if class_name and pc is None:
            raise _Invalid("priorityClassName", f"no PriorityClass named {class_name!r}")
        return JobSpec(
            job_id=job_id,
            gpus=gpus,
            allowed_pools=allowed_values(pod_specs, pool_label),
            allowed_gpu_types=allowed_values(pod_specs, LABEL_GPU_PRODUCT),
            priority_class=str(class_name or "standard"),
            priority_weight=weights.weight(pc.value if pc else None),
            estimated_gpu_s=gpu_hours * 3600.0,
            deadline=_deadline(annotations),
            preemptible=_preemptible(annotations, pc),
            checkpoint_interval_s=_number(
                annotations, ANN_CHECKPOINT_INTERVAL, positive=True, upper=MAX_DURATION_S
            ),
            restart_cost_s=_number(annotations, ANN_RESTART_COST, positive=False, upper=MAX_DURATION_S)
            or 0.0,
            team=annotations.get(ANN_TEAM, "default"),
        )
    except _Invalid as exc:
        return SpecError(job_id=job_id, field=exc.field, message=str(exc))
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first.get("loc", ())) or "spec"
        return SpecError(job_id=job_id, field=_annotation_of(field), message=first.get("msg", str(exc)))
    except (KeyError, TypeError, ValueError) as exc:
        return SpecError(
            job_id=job_id, field="spec", message=f"malformed workload: {type(exc).__name__}: {exc}"
        )


_FIELD_ANNOTATION = {"team": ANN_TEAM, "job_id": LABEL_JOB, "deadline": ANN_DEADLINE}


def _annotation_of(field: str) -> str:
    return _FIELD_ANNOTATION.get(field, field)


__all__ = [
    "ANNOTATIONS",
    "LABEL_JOB",
    "LABEL_KUEUE_QUEUE",
    "PriorityClassInfo",
    "PriorityWeights",
    "SpecError",
    "allowed_values",
    "job_spec",
    "pod_gpus",
]

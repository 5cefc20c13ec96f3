"""Table tests of the pure translation of Kubernetes Jobs and JobSets to JobSpecs (kube/jobspec.py)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from actuators.kube.jobspec import (
    ANN_CHECKPOINT_INTERVAL,
    ANN_DEADLINE,
    ANN_GPU_HOURS,
    ANN_PREEMPTIBLE,
    ANN_RESTART_COST,
    ANN_TEAM,
    PriorityClassInfo,
    PriorityWeights,
    SpecError,
    job_spec,
)
from schemas import JobSpec

CLASSES = {
    "batch-low": PriorityClassInfo("batch-low", 100),
    "batch-high": PriorityClassInfo("batch-high", 5_000, preemptible=False),
}


def job(
    gpus: Any = 2, parallelism: int | None = 2, annotations: dict[str, str] | None = None, **pod: Any
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "x"}
    if gpus is not None:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    spec: dict[str, Any] = {"suspend": True, "template": {"spec": {"containers": [container], **pod}}}
    if parallelism is not None:
        spec["parallelism"] = parallelism
    return {
        "kind": "Job",
        "metadata": {
            "name": "train",
            "labels": {"ebbtide.io/job-id": "j1"},
            "annotations": {ANN_GPU_HOURS: "8", **(annotations or {})},
        },
        "spec": spec,
    }


def jobset(replicas: list[tuple[int, int, int]]) -> dict[str, Any]:
    """replicatedJobs of (replicas, parallelism, gpus per pod)."""
    return {
        "kind": "JobSet",
        "metadata": {
            "name": "js",
            "labels": {"ebbtide.io/job-id": "js1"},
            "annotations": {ANN_GPU_HOURS: "1"},
        },
        "spec": {
            "replicatedJobs": [
                {
                    "name": f"r{i}",
                    "replicas": r,
                    "template": {
                        "spec": {
                            "parallelism": p,
                            "template": {
                                "spec": {
                                    "containers": [
                                        {"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(g)}}}
                                    ]
                                }
                            },
                        }
                    },
                }
                for i, (r, p, g) in enumerate(replicas)
            ]
        },
    }


def affinity(key: str, values: list[str]) -> dict[str, Any]:
    term = {"matchExpressions": [{"key": key, "operator": "In", "values": values}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def spec_of(obj: dict[str, Any]) -> JobSpec:
    out = job_spec(obj, CLASSES)
    assert isinstance(out, JobSpec), out
    return out


@pytest.mark.parametrize(
    ("obj", "gang"),
    [
        (job(gpus=1, parallelism=None), 1),
        (job(gpus=2, parallelism=4), 8),
        (job(gpus="8", parallelism=1), 8),
        (jobset([(2, 1, 4)]), 8),
        (jobset([(1, 2, 1), (3, 1, 2)]), 8),
    ],
)
def test_gang_is_gpus_per_pod_times_parallelism(obj: dict[str, Any], gang: int) -> None:
    assert spec_of(obj).gpus == gang


def test_request_wins_over_limit() -> None:
    obj = job(gpus=4, parallelism=1)
    obj["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] = {"nvidia.com/gpu": "2"}
    assert spec_of(obj).gpus == 2


@pytest.mark.parametrize(
    ("pod", "pools", "types"),
    [
        ({}, [], []),
        ({"nodeSelector": {"ebbtide.io/pool": "a100"}}, ["a100"], []),
        ({"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100"}}, [], ["NVIDIA-H100"]),
        ({"affinity": affinity("ebbtide.io/pool", ["b", "a"])}, ["a", "b"], []),
        ({"affinity": affinity("nvidia.com/gpu.product", ["L4"])}, [], ["L4"]),
    ],
)
def test_pools_and_gpu_types(pod: dict[str, Any], pools: list[str], types: list[str]) -> None:
    spec = spec_of(job(**pod))
    assert (spec.allowed_pools, spec.allowed_gpu_types) == (pools, types)


@pytest.mark.parametrize(
    ("class_name", "weight", "preemptible"),
    [(None, 1.0, True), ("batch-low", 1.0, True), ("batch-high", 2.0, False)],
)
def test_priority_from_the_priority_class(class_name: str | None, weight: float, preemptible: bool) -> None:
    pod = {"priorityClassName": class_name} if class_name else {}
    spec = spec_of(job(**pod))
    assert (spec.priority_class, spec.priority_weight, spec.preemptible) == (
        class_name or "standard",
        weight,
        preemptible,
    )


def test_priority_weights_mapping() -> None:
    weights = PriorityWeights(thresholds=((0, 1.5), (10, 3.0)), default_weight=0.5)
    assert [weights.weight(v) for v in (None, -5, 0, 9, 10, 10**9)] == [0.5, 0.5, 1.5, 1.5, 3.0, 3.0]


def test_annotations_fill_the_spec() -> None:
    obj = job(
        annotations={
            ANN_GPU_HOURS: "2.5",
            ANN_DEADLINE: "2026-12-02T06:00:00Z",
            ANN_CHECKPOINT_INTERVAL: "600",
            ANN_RESTART_COST: "120",
            ANN_TEAM: "vision",
            ANN_PREEMPTIBLE: "false",
        }
    )
    spec = spec_of(obj)
    assert spec.estimated_gpu_s == 9000.0
    assert spec.deadline == datetime(2026, 12, 2, 6, tzinfo=UTC)
    assert (spec.checkpoint_interval_s, spec.restart_cost_s, spec.team, spec.preemptible) == (
        600,
        120,
        "vision",
        False,
    )


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda o: o["metadata"]["annotations"].pop(ANN_GPU_HOURS), ANN_GPU_HOURS),
        (lambda o: o["metadata"]["annotations"].update({ANN_GPU_HOURS: "lots"}), ANN_GPU_HOURS),
        (lambda o: o["metadata"]["annotations"].update({ANN_GPU_HOURS: "-1"}), ANN_GPU_HOURS),
        (lambda o: o["metadata"]["annotations"].update({ANN_GPU_HOURS: "nan"}), ANN_GPU_HOURS),
        (lambda o: o["metadata"]["annotations"].update({ANN_DEADLINE: "tomorrow"}), ANN_DEADLINE),
        (lambda o: o["metadata"]["annotations"].update({ANN_DEADLINE: "2026-12-02T06:00:00"}), ANN_DEADLINE),
        (
            lambda o: o["metadata"]["annotations"].update({ANN_CHECKPOINT_INTERVAL: "0"}),
            ANN_CHECKPOINT_INTERVAL,
        ),
        (lambda o: o["metadata"]["annotations"].update({ANN_RESTART_COST: "-3"}), ANN_RESTART_COST),
        (lambda o: o["metadata"]["annotations"].update({ANN_PREEMPTIBLE: "maybe"}), ANN_PREEMPTIBLE),
        (lambda o: o["metadata"]["annotations"].update({ANN_TEAM: ""}), ANN_TEAM),
        (lambda o: o["spec"]["template"]["spec"].update({"priorityClassName": "nope"}), "priorityClassName"),
        (
            lambda o: o["spec"]["template"]["spec"]["containers"][0].pop("resources"),
            "resources[nvidia.com/gpu]",
        ),
        (
            lambda o: o["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"].update(
                {"nvidia.com/gpu": "1.5"}
            ),
            "resources.limits[nvidia.com/gpu]",
        ),
    ],
)
def test_invalid_workloads_name_the_annotation(mutate: Any, field: str) -> None:
    obj = copy.deepcopy(job())
    mutate(obj)
    out = job_spec(obj, CLASSES)
    assert isinstance(out, SpecError), out
    assert (out.job_id, out.field) == ("j1", field)
    assert out.message

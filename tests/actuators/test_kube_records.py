"""Table tests of the Kubernetes source's pure parts: node and pod records, Job phases, the snapshot."""

from __future__ import annotations

from typing import Any

import pytest

from actuators.kube.records import DeploymentRecord, PodRecord, node_record, pod_record, workload_phase
from actuators.kube.snapshot import inventory_pools, inventory_services


def node(
    ready: str = "True", unschedulable: bool = False, taints: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {"name": "n1", "labels": {"ebbtide.io/pool": "a", "nvidia.com/gpu.product": "H100"}},
        "spec": {"unschedulable": unschedulable, "taints": taints or []},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


@pytest.mark.parametrize(
    ("obj", "reason"),
    [
        (node(), None),
        (node(ready="False"), "NotReady"),
        (node(ready="Unknown"), "NotReady"),
        (node(unschedulable=True), "cordoned"),
        (
            node(taints=[{"key": "gpu-maintenance", "effect": "NoSchedule"}]),
            "taint gpu-maintenance:NoSchedule",
        ),
        (node(taints=[{"key": "x", "effect": "NoExecute"}]), "taint x:NoExecute"),
        (node(taints=[{"key": "x", "effect": "PreferNoSchedule"}]), None),
    ],
)
def test_node_schedulable_or_why_not(obj: dict[str, Any], reason: str | None) -> None:
    rec = node_record(obj)
    assert (rec.pool, rec.gpu_type, rec.gpus, rec.schedulable, rec.reason) == (
        "a",
        "H100",
        8,
        reason is None,
        reason,
    )


def pod(
    phase: str = "Running", node_name: str | None = "n1", gpus: str = "2", **labels: str
) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "labels": labels},
        "spec": {
            "nodeName": node_name,
            "containers": [{"resources": {"requests": {"nvidia.com/gpu": gpus}}}],
        },
        "status": {"phase": phase},
    }


@pytest.mark.parametrize(
    ("obj", "held"),
    [
        (pod(**{"batch.kubernetes.io/job-name": "train"}), ("n1", 2, ("Job", "ns", "train"))),
        (pod(**{"jobset.sigs.k8s.io/jobset-name": "js"}), ("n1", 2, ("JobSet", "ns", "js"))),
        (pod(phase="Pending"), ("n1", 2, None)),
        (pod(phase="Succeeded"), None),
        (pod(phase="Failed"), None),
        (pod(node_name=None), None),
        (pod(gpus="0"), None),
    ],
)
def test_pod_holds_gpus_while_bound_and_unfinished(obj: dict[str, Any], held: Any) -> None:
    rec = pod_record(obj)
    assert (None if rec is None else (rec.node, rec.gpus, rec.owner())) == held


def job(
    suspend: bool, conditions: list[str] = (), deleting: bool = False, action: str | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"annotations": {"ebbtide.io/action": action} if action else {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    return {
        "metadata": meta,
        "spec": {"suspend": suspend},
        "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]},
    }


@pytest.mark.parametrize(
    ("obj", "phase"),
    [
        (job(True), "queued"),
        (job(True, ["Suspended"]), "queued"),
        (job(True, action="preempt"), "preempted"),
        (job(False), "running"),
        (job(False, ["Complete"]), "finished"),
        (job(False, ["Failed"]), "failed"),
        (job(False, deleting=True), "cancelled"),
        (job(False, ["Complete"], deleting=True), "finished"),
    ],
)
def test_job_phase(obj: dict[str, Any], phase: str) -> None:
    assert workload_phase(obj)[0] == phase


def test_free_gpus_per_node_and_service_bounds() -> None:
    nodes = [
        node_record(node()),
        node_record({**node(), "metadata": {"name": "n2", "labels": {"ebbtide.io/pool": "a"}}}),
    ]
    pods = [PodRecord("ns", "n1", 3, "j"), PodRecord("ns", "n1", 2, None)]
    (pool,) = inventory_pools(nodes, pods)
    assert [(n.name, n.gpus, n.gpus_free) for n in pool.nodes] == [("n1", 8, 3), ("n2", 8, 8)]
    deps = [
        DeploymentRecord("ns", "chat-a", "chat", "a", 3, 1),
        DeploymentRecord("ns", "chat-b", "chat", "b", 1, 1),
    ]
    services = inventory_services(deps, [("ns", "chat-a", 2, 6)])
    assert [(s.pool, s.replicas, s.min_replicas, s.max_replicas) for s in services] == [
        ("a", 3, 2, 6),
        ("b", 1, 0, 1_000_000),
    ]

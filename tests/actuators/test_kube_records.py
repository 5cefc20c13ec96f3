"""Table tests of the Kubernetes source's pure parts: node and pod records, Job phases, the snapshot."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from actuators.kube.records import DeploymentRecord, PodRecord, node_record, pod_record, workload_phase
from actuators.kube.snapshot import inventory_pools, inventory_services

NOW = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)


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
    (pool,) = inventory_pools(nodes, pods, NOW)
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


def announcing(
    name: str, annotations: dict[str, str], labels: dict[str, str] | None = None
) -> dict[str, Any]:
    obj = node()
    obj["metadata"] = {
        "name": name,
        "labels": {**obj["metadata"]["labels"], **(labels or {})},
        "annotations": annotations,
    }
    return obj


def test_nodes_announcing_one_window_share_it_and_gke_gives_an_hour_from_its_label() -> None:
    fw = {"ebbtide.io/maintenance": "2026-12-06T14:00:00Z/2026-12-06T16:00:00+00:00"}
    gke = {"cloud.google.com/scheduled-maintenance-time": str(int((NOW + timedelta(hours=3)).timestamp()))}
    over = {"ebbtide.io/maintenance": "2026-12-05T14:00:00Z/2026-12-05T16:00:00Z"}
    nodes = [
        node_record(announcing("n1", fw)),
        node_record(announcing("n2", {**fw})),
        node_record(announcing("n3", {}, gke)),
        node_record(announcing("n4", over)),
        node_record(announcing("n5", {})),
    ]
    (pool,) = inventory_pools(nodes, [], NOW)
    gke_window, shared = pool.windows  # in order of start
    assert (shared.nodes, shared.gpus_out, shared.start, shared.end) == (
        ["n1", "n2"], 16, NOW + timedelta(hours=5), NOW + timedelta(hours=7)
    )  # fmt: skip
    assert shared.reason == "maintenance (ebbtide.io/maintenance)"
    assert (gke_window.nodes, gke_window.start, gke_window.end - gke_window.start) == (
        ["n3"], NOW + timedelta(hours=3), timedelta(hours=1)
    )  # fmt: skip
    assert gke_window.reason == "maintenance (GKE)"


@pytest.mark.parametrize(
    ("annotations", "labels", "error"),
    [
        ({"ebbtide.io/maintenance": "2026-12-06T14:00:00Z"}, {}, "expected START/END"),
        ({"ebbtide.io/maintenance": "2026-12-06T14:00:00/2026-12-06T16:00:00"}, {}, "needs its offset"),
        ({"ebbtide.io/maintenance": "2026-12-06T16:00:00Z/2026-12-06T14:00:00Z"}, {}, "end is not after"),
        ({"ebbtide.io/maintenance": "2026-12-06T14:00:00Z/2027-12-06T14:00:00Z"}, {}, "longer than 30 days"),
        ({"ebbtide.io/maintenance": "tomorrow/later"}, {}, "Invalid isoformat"),
        ({}, {"cloud.google.com/scheduled-maintenance-time": "soon"}, "not Unix seconds"),
        ({}, {"cloud.google.com/scheduled-maintenance-time": "9" * 30}, "outside 1970..2200"),
    ],
)
def test_an_unreadable_announcement_names_the_key_and_value_and_announces_nothing(
    annotations: dict[str, str], labels: dict[str, str], error: str
) -> None:
    record = node_record(announcing("n1", annotations, labels))
    assert record.maintenance is None
    assert record.maintenance_error is not None and error in record.maintenance_error
    assert next(iter({**annotations, **labels})) in record.maintenance_error

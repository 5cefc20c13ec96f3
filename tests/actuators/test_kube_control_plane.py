"""The e2e tests' control plane works as a cluster does: KWOK nodes turn Ready with their GPUs, the
scheduler binds a Job's pods only where GPUs are free, KWOK completes them after their annotated
duration and the real Job controller marks the Job Complete."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kube_cluster import ADMIN_TOKEN
from kube_control_plane import COMPLETE_DELAY_ANNOTATION, ControlPlane, gpu_node, wait_for

from actuators.kube import api_client

pytestmark = [pytest.mark.kubernetes, pytest.mark.timeout(2400)]


def gpu_job(name: str, gpus: int, parallelism: int, delay: str) -> dict[str, Any]:
    container = {"name": "main", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
    return {
        "metadata": {"name": name},
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "template": {
                "metadata": {"annotations": {COMPLETE_DELAY_ANNOTATION: delay}},
                "spec": {"restartPolicy": "Never", "containers": [container]},
            },
        },
    }


def test_jobs_are_scheduled_on_gpu_nodes_and_completed(kube_control_plane: ControlPlane) -> None:
    from kubernetes import client

    api = api_client(kube_control_plane.cluster.configuration(ADMIN_TOKEN))
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    ns, node = f"cp-{uuid.uuid4().hex[:6]}", f"gpu-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns}})
    core.create_node(gpu_node(node, "cp-pool", gpus=4))

    def ready() -> bool:
        conditions = core.read_node(node).status.conditions or []
        return any(c.type == "Ready" and c.status == "True" for c in conditions)

    wait_for("the KWOK node to be Ready", ready)
    # 2 pods x 2 GPUs fit the node's 4; a second such Job must wait for the first to finish.
    batch.create_namespaced_job(ns, gpu_job("first", 2, 2, "3s"))
    batch.create_namespaced_job(ns, gpu_job("second", 2, 2, "1s"))

    def bound_gpus() -> int:
        pods = core.list_namespaced_pod(ns).items
        return sum(
            2 for p in pods if p.spec.node_name == node and p.status.phase not in {"Succeeded", "Failed"}
        )

    def complete(name: str) -> bool:
        conditions = batch.read_namespaced_job(name, ns).status.conditions or []
        return any(c.type == "Complete" and c.status == "True" for c in conditions)

    peak = 0

    def both_complete() -> bool:
        nonlocal peak
        peak = max(peak, bound_gpus())
        return complete("first") and complete("second")

    wait_for("both Jobs to be Complete", both_complete, timeout_s=90)
    assert 0 < peak <= 4, f"the node's 4 GPUs were over-committed: {peak} bound at once"
    pods = core.list_namespaced_pod(ns).items
    assert len(pods) == 4 and {p.spec.node_name for p in pods} == {node}
    assert {p.status.phase for p in pods} == {"Succeeded"}
    core.delete_node(node)
    core.delete_namespace(ns)

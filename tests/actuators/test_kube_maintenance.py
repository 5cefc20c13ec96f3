"""A job started off nodes that go out for maintenance, on a real control plane (API server,
scheduler, KWOK nodes): the backend's node affinity is what keeps the scheduler off them."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from kube_cluster import ADMIN_TOKEN
from kube_control_plane import ControlPlane, gpu_node, wait_for

from actuators.engine import ActuationEngine
from actuators.kube import KubernetesBackend, api_client
from actuators.kube.jobspec import ANN_GPU_HOURS, LABEL_JOB
from schemas import Allocation, JobAction, JobDecision

pytestmark = [pytest.mark.kubernetes, pytest.mark.timeout(2400)]


def test_the_scheduler_places_the_job_off_the_node_going_out(kube_control_plane: ControlPlane) -> None:
    from kubernetes import client

    api = api_client(kube_control_plane.cluster.configuration(ADMIN_TOKEN))
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    tag = uuid.uuid4().hex[:6]
    ns, pool, out, stays = f"mt-{tag}", f"pool-{tag}", f"out-{tag}", f"stays-{tag}"
    core.create_namespace({"metadata": {"name": ns}})
    for node in (out, stays):
        core.create_node(gpu_node(node, pool, gpus=4))
    # the submitter prefers the node that goes out: without ebbtide's affinity the pod lands there
    prefer = {
        "weight": 100,
        "preference": {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [out]}]},
    }
    container = {"name": "main", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "4"}}}
    pod_spec = {
        "restartPolicy": "Never",
        "containers": [container],
        "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [prefer]}},
    }
    for name in ("long", "short"):
        job = {
            "metadata": {
                "name": name,
                "labels": {LABEL_JOB: f"j-{name}-{tag}"},
                "annotations": {ANN_GPU_HOURS: "1"},
            },
            "spec": {"suspend": True, "template": {"spec": pod_spec}},
        }
        batch.create_namespaced_job(ns, job)
    backend = KubernetesBackend(
        api, cluster="test", namespace=ns, checkpoint_grace_s=0.2, request_timeout_s=5
    )
    now = datetime.now(UTC).replace(microsecond=0)

    def start(name: str, avoid: list[str]) -> None:
        job_id = f"j-{name}-{tag}"
        decision = JobDecision(
            job_id=job_id, action=JobAction.RUN, pool=pool, gpus=4, reason="t", avoid_nodes=avoid
        )
        allocation = Allocation(cluster="test", plan_id=f"p-{name}", policy="test", issued_at=now, step_s=900,
                                valid_until=now + timedelta(minutes=15), jobs=[decision])  # fmt: skip
        (result,) = ActuationEngine(backend, "test").apply(allocation)
        assert result.outcome == "applied", result

    def node_of(job: str) -> str | None:
        pods = core.list_namespaced_pod(ns, label_selector=f"job-name={job}").items
        return pods[0].spec.node_name if pods else None

    try:
        start("long", [out])
        wait_for("the long job's pod bound", lambda: node_of("long") is not None)
        assert node_of("long") == stays, "kept off the node it prefers, which goes out before it would end"
        start("short", [])  # ends before the window: the node is its to use
        wait_for("the short job's pod bound", lambda: node_of("short") is not None)
        assert node_of("short") == out
    finally:
        for node in (out, stays):
            core.delete_node(node)
        core.delete_namespace(ns)

"""The Kubernetes source against a real control plane (API server, Job controller, scheduler, KWOK nodes).

It lists and watches opted-in Jobs, Nodes, Pods, Deployments, HPAs and PriorityClasses into its
view: specs from the objects, lifecycle from Job conditions, deletion as cancelled, an invalid
annotation as an Event naming it, nodes' GPUs free from the pods bound to them, Kueue's Jobs left out.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kube_cluster import ADMIN_TOKEN
from kube_control_plane import COMPLETE_DELAY_ANNOTATION, ControlPlane, gpu_node, wait_for

from actuators.kube import api_client
from actuators.kube.events import REASON_INVALID
from actuators.kube.jobspec import ANN_DEADLINE, ANN_GPU_HOURS, LABEL_JOB, LABEL_KUEUE_QUEUE
from actuators.kube.maintenance import ANN_MAINTENANCE, LABEL_GKE_MAINTENANCE
from actuators.kube.reflector import Backoff
from actuators.kube.source import KubernetesSource
from loop.sources import lifecycle_events
from schemas import JobEventKind

pytestmark = [pytest.mark.kubernetes, pytest.mark.timeout(2400)]


def suspended_job(
    name: str,
    job_id: str,
    gpus: int,
    parallelism: int = 1,
    annotations: dict[str, str] | None = None,
    **pod: Any,
) -> dict[str, Any]:
    container = {"name": "main", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
    return {
        "metadata": {
            "name": name,
            "labels": {LABEL_JOB: job_id},
            "annotations": {ANN_GPU_HOURS: "1", **(annotations or {})},
        },
        "spec": {
            "suspend": True,
            "parallelism": parallelism,
            "completions": parallelism,
            "template": {
                "metadata": {"annotations": {COMPLETE_DELAY_ANNOTATION: "2s"}},
                "spec": {"restartPolicy": "Never", "containers": [container], **pod},
            },
        },
    }


@pytest.fixture
def world(kube_control_plane: ControlPlane) -> Iterator[tuple[Any, str, str]]:
    from kubernetes import client

    admin = api_client(kube_control_plane.cluster.configuration(ADMIN_TOKEN))
    core = client.CoreV1Api(admin)
    tag = uuid.uuid4().hex[:6]
    ns, pool = f"src-{tag}", f"pool-{tag}"
    core.create_namespace({"metadata": {"name": ns}})
    for i in range(2):
        core.create_node(gpu_node(f"{pool}-n{i}", pool, gpus=4))
    yield admin, ns, pool
    for i in range(2):
        core.delete_node(f"{pool}-n{i}")
    core.delete_namespace(ns)


def source_for(plane: ControlPlane, ns: str) -> KubernetesSource:
    api = api_client(plane.cluster.configuration(ADMIN_TOKEN))
    return KubernetesSource(
        api, cluster="test", namespaces=[ns], backoff=Backoff(0.1, 1.0), watch_timeout_s=30
    )


def workloads(source: KubernetesSource) -> dict[str, Any]:
    return {w.job_id: w for w in source.view.workloads.values() + source.view.cancelled_workloads()}


def test_source_follows_jobs_from_submission_to_completion(kube_control_plane, world) -> None:
    from kubernetes import client

    admin, ns, pool = world
    batch, core = client.BatchV1Api(admin), client.CoreV1Api(admin)
    sched = client.SchedulingV1Api(admin)
    pc = f"high-{ns}"
    sched.create_priority_class({"metadata": {"name": pc}, "value": 5000})
    batch.create_namespaced_job(
        ns,
        suspended_job(
            "train", "j-train", 2, parallelism=2, priorityClassName=pc, nodeSelector={"ebbtide.io/pool": pool}
        ),
    )
    batch.create_namespaced_job(ns, suspended_job("bad", "j-bad", 1, annotations={ANN_DEADLINE: "soon"}))
    kueued = suspended_job("kq", "j-kueue", 1)
    kueued["metadata"]["labels"][LABEL_KUEUE_QUEUE] = "q"
    batch.create_namespaced_job(ns, kueued)

    source = source_for(kube_control_plane, ns)
    source.start()
    try:
        seen = workloads(source)
        assert set(seen) == {"j-train", "j-bad"}, "Kueue's Job is left to Kueue"
        train = seen["j-train"]
        assert (train.phase, train.spec.gpus, train.spec.allowed_pools, train.spec.priority_weight) == (
            "queued",
            4,
            [pool],
            2.0,
        )
        assert seen["j-bad"].spec is None and seen["j-bad"].error.field == ANN_DEADLINE

        def invalid_events() -> list[str]:
            items = core.list_namespaced_event(ns).items
            return [
                e.message for e in items if e.reason == REASON_INVALID and e.involved_object.name == "bad"
            ]

        (message,) = wait_for("the invalid-spec Event", invalid_events)
        assert ANN_DEADLINE in message

        snap = source.snapshot()
        assert set(snap.jobs) == {"j-train"}, "an invalid spec is reported on the Job, not planned"
        assert (snap.jobs["j-train"].phase, snap.jobs["j-train"].spec.gpus) == ("held", 4)
        (submitted,) = lifecycle_events({}, snap)
        assert (submitted.kind, submitted.spec.gpus) == (JobEventKind.SUBMITTED, 4)
        last = {submitted.job_id: submitted.kind}

        nodes = {n.name: n for n in source.view.nodes.values() if n.pool == pool}
        wait_for(
            "both nodes Ready",
            lambda: all(n.schedulable for n in source.view.nodes.values() if n.pool == pool),
        )
        assert {n.gpus for n in nodes.values()} == {4}

        # resumed: the scheduler binds both pods, the source sees them hold GPUs, then the Job completes
        batch.patch_namespaced_job("train", ns, {"spec": {"suspend": False}})
        wait_for("the Job running", lambda: workloads(source)["j-train"].phase == "running")
        wait_for(
            "2 pods x 2 GPUs bound",
            lambda: sum(p.gpus for p in source.view.pods.values() if p.namespace == ns) == 4,
        )
        wait_for("the Job finished", lambda: workloads(source)["j-train"].phase == "finished", timeout_s=60)
        wait_for("its pods released", lambda: not [p for p in source.view.pods.values() if p.namespace == ns])
        (finished,) = lifecycle_events(last, source.snapshot())
        assert finished.kind == JobEventKind.FINISHED
        last[finished.job_id] = finished.kind
        assert lifecycle_events(last, source.snapshot()) == [], "each change once"

        # deleted before it ran: cancelled
        batch.delete_namespaced_job("bad", ns, propagation_policy="Background")
        wait_for("the deleted Job cancelled", lambda: workloads(source)["j-bad"].phase == "cancelled")

        # a cordoned node is not schedulable, and says why
        core.patch_node(f"{pool}-n0", {"spec": {"unschedulable": True}})
        wait_for(
            "cordon seen",
            lambda: (
                next(n for n in source.view.nodes.values() if n.name == f"{pool}-n0").reason == "cordoned"
            ),
        )
        assert all(r.stats.errors == 0 for r in source.reflectors if not r.name.startswith("jobsets")), [
            (r.name, r.stats.last_error) for r in source.reflectors
        ]
    finally:
        source.stop()
        sched.delete_priority_class(pc)


def test_source_reports_services_with_their_hpa_bounds(kube_control_plane, world) -> None:
    from kubernetes import client

    admin, ns, pool = world
    apps, hpas = client.AppsV1Api(admin), client.AutoscalingV2Api(admin)
    labels = {"app": "chat", "ebbtide.io/service": "chat", "ebbtide.io/pool": pool}
    container = {"name": "server", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    apps.create_namespaced_deployment(
        ns,
        {
            "metadata": {"name": "chat", "labels": labels},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "chat"}},
                "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
            },
        },
    )
    source = source_for(kube_control_plane, ns)
    source.start()
    try:
        (svc,) = source.snapshot().inventory.services
        assert (svc.service, svc.pool, svc.replicas, svc.min_replicas) == ("chat", pool, 2, 0)
        hpas.create_namespaced_horizontal_pod_autoscaler(
            ns,
            {
                "metadata": {"name": "chat"},
                "spec": {
                    "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "chat"},
                    "minReplicas": 2,
                    "maxReplicas": 6,
                },
            },
        )
        wait_for("the HPA's bounds", lambda: source.snapshot().inventory.services[0].max_replicas == 6)
        assert source.snapshot().inventory.services[0].min_replicas == 2
        # the Deployment's two pods are scheduled on the pool's nodes: 2 GPUs no longer free
        wait_for(
            "the service's pods bound",
            lambda: (
                sum(n.gpus_free for p in source.snapshot().inventory.pools if p.name == pool for n in p.nodes)
                == 6
            ),
        )
    finally:
        source.stop()


def test_maintenance_announced_on_nodes_reaches_the_inventory(kube_control_plane, world, caplog) -> None:
    from kubernetes import client

    admin, ns, pool = world
    core = client.CoreV1Api(admin)
    source = source_for(kube_control_plane, ns)
    source.start()
    try:
        start = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=2)
        interval = f"{start.isoformat()}/{(start + timedelta(hours=3)).isoformat()}"
        core.patch_node(f"{pool}-n0", {"metadata": {"annotations": {ANN_MAINTENANCE: interval}}})
        core.patch_node(f"{pool}-n1", {"metadata": {"annotations": {ANN_MAINTENANCE: "tonight"}}})

        def windows() -> list[Any]:
            return next(p.windows for p in source.snapshot().inventory.pools if p.name == pool)

        wait_for("the annotated node's window", lambda: len(windows()) == 1)
        (window,) = windows()
        assert (window.nodes, window.gpus_out, window.start, window.end) == (
            [f"{pool}-n0"], 4, start, start + timedelta(hours=3)
        )  # fmt: skip
        logged = f"node {pool}-n1 announces no maintenance window: {ANN_MAINTENANCE}: 'tonight'"
        wait_for("the unreadable one logged", lambda: windows() and logged in caplog.text)
        assert caplog.text.count(logged) == 1, "once, not at every snapshot"
        gke_start = int(start.timestamp())
        core.patch_node(f"{pool}-n1", {"metadata": {"labels": {LABEL_GKE_MAINTENANCE: str(gke_start)},
                                                    "annotations": {ANN_MAINTENANCE: None}}})  # fmt: skip
        wait_for("GKE's label read as an hour from its time", lambda: len(windows()) == 2)
        assert [(w.nodes, w.end - w.start) for w in windows()] == [
            ([f"{pool}-n1"], timedelta(hours=1)), ([f"{pool}-n0"], timedelta(hours=3))
        ]  # fmt: skip
    finally:
        source.stop()


def test_a_job_ebbtide_preempts_is_reported_preempted_once(
    kube_control_plane, world, make_allocation
) -> None:
    from kubernetes import client

    from actuators.engine import ActuationEngine, RetryPolicy
    from actuators.kube import KubernetesBackend

    admin, ns, pool = world
    batch = client.BatchV1Api(admin)
    job = suspended_job("long", "j-long", 2, nodeSelector={"ebbtide.io/pool": pool})
    job["spec"]["template"]["metadata"]["annotations"][COMPLETE_DELAY_ANNOTATION] = "10m"
    batch.create_namespaced_job(ns, job)
    api = api_client(kube_control_plane.cluster.configuration(ADMIN_TOKEN))
    backend = KubernetesBackend(
        api, cluster="test", namespace=ns, checkpoint_grace_s=0.1, request_timeout_s=5
    )
    engine = ActuationEngine(
        backend, "test", retry=RetryPolicy(attempts=2, base_delay_s=0.1, max_delay_s=0.2)
    )
    source = source_for(kube_control_plane, ns)
    source.start()
    try:
        (submitted,) = lifecycle_events({}, source.snapshot())
        last = {submitted.job_id: submitted.kind}
        engine.apply(make_allocation("p1", jobs=[("j-long", "run", pool, 2)]))
        wait_for("its pod bound", lambda: source.snapshot().jobs["j-long"].nodes)
        (started,) = lifecycle_events(last, source.snapshot())
        last[started.job_id] = started.kind
        engine.apply(make_allocation("p2", jobs=[("j-long", "preempt", None, 0)]))
        wait_for("suspended by ebbtide", lambda: source.snapshot().jobs["j-long"].phase == "suspended")
        (preempted,) = lifecycle_events(last, source.snapshot())
        assert (started.kind, preempted.kind) == (JobEventKind.STARTED, JobEventKind.PREEMPTED)
        last[preempted.job_id] = preempted.kind
        assert lifecycle_events(last, source.snapshot()) == []
        wait_for("its pod stopped", lambda: not [p for p in source.view.pods.values() if p.namespace == ns])
    finally:
        source.stop()

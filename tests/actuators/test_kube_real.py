"""The Kubernetes actuator against a real kube-apiserver + etcd (no controllers), with deploy/rbac/ RBAC.

The actuator authenticates as its own user whose only rights are the Role/ClusterRole of
deploy/rbac/actuator.yaml, so these tests also show that RBAC is enough, and not more.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import yaml
from kube_cluster import ACTUATOR_TOKEN, KubeCluster

from actuators.engine import ActuationEngine, RetryPolicy, results_by_target
from actuators.kube import KubernetesBackend, api_client
from actuators.kube.affinity import REQUIRED
from actuators.kube.backend import ANN_CHECKPOINT, ANN_PLAN, LABEL_JOB, LABEL_POOL, LABEL_SERVICE

# The first test's setup may build kube-apiserver when the cache is cold (minutes on 2 cores);
# each test itself takes seconds.
pytestmark = [pytest.mark.kubernetes, pytest.mark.timeout(2400)]
JOBSETS = ("jobset.x-k8s.io", "v1alpha2")


def make_actuator(
    kube_cluster: KubeCluster, namespace: str, **kwargs: Any
) -> tuple[ActuationEngine, KubernetesBackend]:
    api = api_client(kube_cluster.configuration(ACTUATOR_TOKEN))
    backend = KubernetesBackend(
        api, cluster="test", namespace=namespace, checkpoint_grace_s=0.2, request_timeout_s=5, **kwargs
    )
    return ActuationEngine(
        backend, "test", retry=RetryPolicy(attempts=3, base_delay_s=0.2, max_delay_s=1.0)
    ), backend


def deployment(name: str, service: str, pool: str, replicas: int) -> dict[str, Any]:
    labels = {"app": name, LABEL_SERVICE: service, LABEL_POOL: pool}
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "server",
                            "image": "example.invalid/llm:1",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ]
                },
            },
        },
    }


def batch_job(name: str, job_id: str, gpus: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {LABEL_JOB: job_id}},
        "spec": {
            "suspend": True,
            "parallelism": 1,
            "completions": 1,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "train",
                            "image": "example.invalid/train:1",
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                        }
                    ],
                }
            },
        },
    }


def test_scale_deployment_and_annotate_the_plan(kube_cluster, namespace, admin, make_allocation) -> None:
    from kubernetes import client

    apps = client.AppsV1Api(admin)
    apps.create_namespaced_deployment(namespace, deployment("chat-a", "chat", "pool-a", 1))
    actuator, _ = make_actuator(kube_cluster, namespace)

    (result,) = actuator.apply(make_allocation("plan-1", services=[("chat", "pool-a", 3, 3.0)]))

    assert (result.action, result.outcome) == ("scale", "applied")
    dep = apps.read_namespaced_deployment("chat-a", namespace)
    assert dep.spec.replicas == 3
    assert dep.metadata.annotations[ANN_PLAN] == "plan-1"


def test_hpa_bounds_move_and_deployment_replicas_are_left_to_the_hpa(
    kube_cluster, namespace, admin, make_allocation
) -> None:
    from kubernetes import client

    apps = client.AppsV1Api(admin)
    hpas = client.AutoscalingV2Api(admin)
    apps.create_namespaced_deployment(namespace, deployment("chat-b", "chat", "pool-b", 2))
    hpas.create_namespaced_horizontal_pod_autoscaler(
        namespace,
        {
            "metadata": {"name": "chat-b"},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "chat-b"},
                "minReplicas": 1,
                "maxReplicas": 5,
                "metrics": [
                    {
                        "type": "Resource",
                        "resource": {
                            "name": "cpu",
                            "target": {"type": "Utilization", "averageUtilization": 80},
                        },
                    }
                ],
            },
        },
    )
    actuator, _ = make_actuator(kube_cluster, namespace)

    (first,) = actuator.apply(make_allocation("plan-1", services=[("chat", "pool-b", 4, 4.0)]))
    hpa = hpas.read_namespaced_horizontal_pod_autoscaler("chat-b", namespace)
    assert (first.action, first.outcome) == ("hpa-bounds", "applied")
    assert (hpa.spec.min_replicas, hpa.spec.max_replicas) == (4, 5)
    assert apps.read_namespaced_deployment("chat-b", namespace).spec.replicas == 2, "never fight the HPA"

    (second,) = actuator.apply(make_allocation("plan-2", services=[("chat", "pool-b", 7, 7.0)]))
    hpa = hpas.read_namespaced_horizontal_pod_autoscaler("chat-b", namespace)
    assert second.outcome == "applied"
    assert (hpa.spec.min_replicas, hpa.spec.max_replicas) == (7, 7)
    assert apps.read_namespaced_deployment("chat-b", namespace).spec.replicas == 2

    # burst headroom lent to batch: the HPA may add that many replicas above the plan
    lending = make_allocation("plan-3", services=[("chat", "pool-b", 5, 5.0)])
    burst = lending.services[0].model_copy(update={"burst_gpus": 3.0})
    (third,) = actuator.apply(lending.model_copy(update={"services": [burst]}))
    hpa = hpas.read_namespaced_horizontal_pod_autoscaler("chat-b", namespace)
    assert third.outcome == "applied"
    assert (hpa.spec.min_replicas, hpa.spec.max_replicas) == (5, 8)


def test_job_resumed_on_its_pool_then_suspended_after_checkpoint(
    kube_cluster, namespace, admin, make_allocation
) -> None:
    from kubernetes import client

    batch = client.BatchV1Api(admin)
    batch.create_namespaced_job(namespace, batch_job("train-1", "job-1", 4))
    batch.create_namespaced_job(namespace, batch_job("train-2", "job-2", 2))
    actuator, backend = make_actuator(kube_cluster, namespace)
    assert backend.observe().jobs["job-1"].phase == "held"

    results = results_by_target(
        actuator.apply(
            make_allocation("plan-1", jobs=[("job-1", "run", "pool-b", 4), ("job-2", "hold", None, 0)])
        )
    )

    assert results["job/job-1"].outcome == "applied"
    # job-2 was already suspended: only its decision is noted (annotation and Event)
    assert results["job/job-2"].outcome == "applied"
    job = batch.read_namespaced_job("train-1", namespace)
    assert job.spec.suspend is False
    assert job.spec.template.spec.node_selector == {LABEL_POOL: "pool-b"}
    assert job.metadata.annotations[ANN_PLAN] == "plan-1"
    assert batch.read_namespaced_job("train-2", namespace).spec.suspend is True
    assert backend.observe().jobs["job-1"].pool == "pool-b"

    (pre,) = actuator.apply(make_allocation("plan-2", jobs=[("job-1", "preempt", None, 0)]))
    job = batch.read_namespaced_job("train-1", namespace)
    assert (pre.action, pre.outcome) == ("preempt", "applied")
    assert job.spec.suspend is True
    assert ANN_CHECKPOINT in job.metadata.annotations
    assert job.metadata.annotations[ANN_PLAN] == "plan-2"


def test_same_allocation_twice_changes_nothing(kube_cluster, namespace, admin, make_allocation) -> None:
    from kubernetes import client

    apps, batch = client.AppsV1Api(admin), client.BatchV1Api(admin)
    apps.create_namespaced_deployment(namespace, deployment("chat-a", "chat", "pool-a", 1))
    batch.create_namespaced_job(namespace, batch_job("train-1", "job-1", 4))
    actuator, _ = make_actuator(kube_cluster, namespace)
    allocation = make_allocation(
        "plan-x", services=[("chat", "pool-a", 2, 2.0)], jobs=[("job-1", "run", "pool-a", 4)]
    )

    assert {r.outcome for r in actuator.apply(allocation)} == {"applied"}
    versions = (
        apps.read_namespaced_deployment("chat-a", namespace).metadata.resource_version,
        batch.read_namespaced_job("train-1", namespace).metadata.resource_version,
    )
    second = actuator.apply(allocation)

    assert {r.outcome for r in second} == {"already-applied"}
    assert versions == (
        apps.read_namespaced_deployment("chat-a", namespace).metadata.resource_version,
        batch.read_namespaced_job("train-1", namespace).metadata.resource_version,
    )


def test_rbac_is_least_privilege(kube_cluster, namespace, admin) -> None:
    from kubernetes import client

    client.BatchV1Api(admin).create_namespaced_job(namespace, batch_job("train-1", "job-1", 1))
    actuator_api = api_client(kube_cluster.configuration(ACTUATOR_TOKEN))
    with pytest.raises(client.ApiException) as denied:
        client.BatchV1Api(actuator_api).delete_namespaced_job("train-1", namespace)
    assert denied.value.status == 403
    with pytest.raises(client.ApiException) as secrets:
        client.CoreV1Api(actuator_api).list_namespaced_secret(namespace)
    assert secrets.value.status == 403


@pytest.mark.slow
def test_api_server_down_then_back_the_step_completes(
    kube_cluster, namespace, admin, make_allocation
) -> None:
    from kubernetes import client

    client.AppsV1Api(admin).create_namespaced_deployment(namespace, deployment("chat-a", "chat", "pool-a", 1))
    client.BatchV1Api(admin).create_namespaced_job(namespace, batch_job("train-1", "job-1", 4))
    actuator, backend = make_actuator(kube_cluster, namespace)
    allocation = make_allocation(
        "plan-d", services=[("chat", "pool-a", 5, 5.0)], jobs=[("job-1", "run", "pool-b", 4)]
    )

    kube_cluster.stop_apiserver()
    try:
        down = actuator.apply(allocation)
    finally:
        kube_cluster.start_apiserver()

    assert {(r.outcome, r.permanent) for r in down} == {("retrying", False)}
    back = {r.target: r.outcome for r in actuator.apply(allocation)}
    assert back == {"service/chat/pool-a": "applied", "job/job-1": "applied"}
    observed = backend.observe()
    assert observed.service("chat", "pool-a").replicas == 5
    assert (observed.jobs["job-1"].phase, observed.jobs["job-1"].pool) == ("pending", "pool-b")


def install_jobset_crd(admin: Any) -> None:
    """The JobSet CRD (schema left open): what the JobSet controller installs, minus the controller."""
    from kubernetes import client

    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "jobsets.jobset.x-k8s.io"},
        "spec": {
            "group": "jobset.x-k8s.io",
            "scope": "Namespaced",
            "names": {"plural": "jobsets", "singular": "jobset", "kind": "JobSet", "listKind": "JobSetList"},
            "versions": [
                {
                    "name": "v1alpha2",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    },
                }
            ],
        },
    }
    try:
        client.ApiextensionsV1Api(admin).create_custom_resource_definition(crd)
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        got = client.ApiextensionsV1Api(admin).read_custom_resource_definition("jobsets.jobset.x-k8s.io")
        if any(c.type == "Established" and c.status == "True" for c in got.status.conditions or []):
            return
        time.sleep(0.2)
    raise AssertionError("JobSet CRD not established")


def test_jobset_placed_on_all_its_replicated_jobs_and_suspended(
    kube_cluster, namespace, admin, make_allocation
) -> None:
    from kubernetes import client

    install_jobset_crd(admin)
    custom = client.CustomObjectsApi(admin)
    template = batch_job("x", "unused", 8)["spec"]["template"]
    custom.create_namespaced_custom_object(
        "jobset.x-k8s.io",
        "v1alpha2",
        namespace,
        "jobsets",
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "llm-pretrain", "labels": {LABEL_JOB: "job-js"}},
            "spec": {
                "suspend": True,
                "replicatedJobs": [
                    {
                        "name": "workers",
                        "replicas": 2,
                        "template": {"spec": {"parallelism": 1, "template": template}},
                    },
                    {
                        "name": "driver",
                        "replicas": 1,
                        "template": {"spec": {"parallelism": 1, "template": template}},
                    },
                ],
            },
        },
    )
    actuator, backend = make_actuator(kube_cluster, namespace)
    seen = backend.observe().jobs["job-js"]
    assert (seen.phase, seen.gpus, seen.pool) == ("held", 24, None)

    (run,) = actuator.apply(make_allocation("plan-js", jobs=[("job-js", "run", "pool-a", 24)]))
    obj = custom.get_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", "llm-pretrain"
    )
    assert run.outcome == "applied"
    assert obj["spec"]["suspend"] is False
    assert [
        rj["template"]["spec"]["template"]["spec"]["nodeSelector"] for rj in obj["spec"]["replicatedJobs"]
    ] == [{LABEL_POOL: "pool-a"}, {LABEL_POOL: "pool-a"}]
    assert obj["metadata"]["annotations"][ANN_PLAN] == "plan-js"
    assert actuator.apply(make_allocation("plan-js", jobs=[("job-js", "run", "pool-a", 24)]))[0].outcome == (
        "already-applied"
    )

    (pre,) = actuator.apply(make_allocation("plan-js2", jobs=[("job-js", "preempt", None, 0)]))
    obj = custom.get_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", "llm-pretrain"
    )
    assert (pre.outcome, obj["spec"]["suspend"]) == ("applied", True)
    assert ANN_CHECKPOINT in obj["metadata"]["annotations"]

    def run_avoiding(plan_id: str, avoid: list[str]) -> list[Any]:
        allocation = make_allocation(plan_id, jobs=[("job-js", "run", "pool-a", 24)])
        decision = allocation.jobs[0].model_copy(update={"avoid_nodes": avoid})
        (result,) = actuator.apply(allocation.model_copy(update={"jobs": [decision]}))
        assert result.outcome == "applied", result
        obj = custom.get_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", "llm-pretrain"
        )
        pods = [rj["template"]["spec"]["template"]["spec"] for rj in obj["spec"]["replicatedJobs"]]
        suspend = {"spec": {"suspend": True}}
        custom.patch_namespaced_custom_object(*JOBSETS, namespace, "jobsets", "llm-pretrain", suspend)
        return [p.get("affinity") for p in pods]

    off_n1 = {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}
    assert (
        run_avoiding("plan-js3", ["n1"])
        == [{"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [off_n1]}}}] * 2
    )
    assert run_avoiding("plan-js4", []) == [None, None], "the next start sheds them"


def test_observation_counts_gpus_per_pool_from_labelled_nodes(kube_cluster, namespace, admin) -> None:
    from kubernetes import client

    core = client.CoreV1Api(admin)
    names = [f"{namespace}-gpu-{i}" for i in range(2)]
    for name in names:
        core.create_node({"metadata": {"name": name, "labels": {LABEL_POOL: "pool-a"}}})
        core.patch_node_status(
            name, {"status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"}}}
        )
    try:
        client.AppsV1Api(admin).create_namespaced_deployment(
            namespace, deployment("chat-a", "chat", "pool-a", 3)
        )
        _, backend = make_actuator(kube_cluster, namespace)
        observed = backend.observe()
        assert observed.gpus_total == {"pool-a": 16}
        assert observed.gpus_free == {"pool-a": 13}
        assert observed.service("chat", "pool-a").gpus == 3.0
    finally:
        for name in names:
            core.delete_node(name)


def test_configured_from_a_kubeconfig_file(kube_cluster, namespace, admin, make_allocation, tmp_path) -> None:
    from kubernetes import client

    from actuators.factory import ActuatorConfig, KubernetesConfig, build_actuator

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "test",
                "clusters": [
                    {
                        "name": "test",
                        "cluster": {
                            "server": kube_cluster.url,
                            "certificate-authority": str(kube_cluster.root / "certs" / "apiserver.crt"),
                        },
                    }
                ],
                "users": [{"name": "actuator", "user": {"token": ACTUATOR_TOKEN}}],
                "contexts": [
                    {
                        "name": "test",
                        "context": {"cluster": "test", "user": "actuator", "namespace": namespace},
                    }
                ],
            }
        )
    )
    client.AppsV1Api(admin).create_namespaced_deployment(namespace, deployment("chat-a", "chat", "pool-a", 1))
    config = ActuatorConfig(
        backend="kubernetes",
        kubernetes=KubernetesConfig(kubeconfig=kubeconfig, context="test", namespaces=[namespace]),
    )
    actuator = build_actuator(config, "test")
    (result,) = actuator.apply(make_allocation("plan-k", services=[("chat", "pool-a", 2, 2.0)]))
    assert (result.backend, result.outcome) == ("kubernetes", "applied")
    assert client.AppsV1Api(admin).read_namespaced_deployment("chat-a", namespace).spec.replicas == 2


def test_a_job_started_off_nodes_going_out_keeps_its_own_affinity_and_sheds_ours_later(
    kube_cluster, namespace, admin, make_allocation
) -> None:
    from kubernetes import client

    batch = client.BatchV1Api(admin)
    job = batch_job("train-m", "job-m", 4)
    h100 = {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H100"]}
    required = {"nodeSelectorTerms": [{"matchExpressions": [h100]}]}
    job["spec"]["template"]["spec"]["affinity"] = {"nodeAffinity": {REQUIRED: required}}
    batch.create_namespaced_job(namespace, job)
    actuator, _ = make_actuator(kube_cluster, namespace)

    def run(plan_id: str, avoid: list[str]) -> None:
        allocation = make_allocation(plan_id, jobs=[("job-m", "run", "pool-a", 4)])
        decision = allocation.jobs[0].model_copy(update={"avoid_nodes": avoid})
        (result,) = actuator.apply(allocation.model_copy(update={"jobs": [decision]}))
        assert result.outcome == "applied", result

    def terms() -> tuple[list[Any], dict[str, str]]:
        read = batch.read_namespaced_job("train-m", namespace)
        required = (
            read.spec.template.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
        )
        return [
            admin.sanitize_for_serialization(t) for t in required.node_selector_terms
        ], read.metadata.annotations

    run("plan-m1", ["n2", "n1"])
    (term,), annotations = terms()
    assert term == {
        "matchExpressions": [h100],
        "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": [n]} for n in ("n1", "n2")],
    }, "ANDed into the submitter's own term"
    assert annotations["ebbtide.io/avoided-nodes"] == "n1,n2"
    (pre,) = actuator.apply(make_allocation("plan-m2", jobs=[("job-m", "preempt", None, 0)]))
    assert pre.outcome == "applied"
    run("plan-m3", [])  # suspended again, started where no node goes out: only its own term is left
    (term,), annotations = terms()
    assert term == {"matchExpressions": [h100]}
    assert "ebbtide.io/avoided-nodes" not in annotations

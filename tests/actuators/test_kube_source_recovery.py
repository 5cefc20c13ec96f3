"""The Kubernetes source recovers as client-go's reflectors do, against a real API server and etcd:
its watches back off while the API server is down and resume after; a watch whose resourceVersion
etcd has compacted away is answered 410 Gone and the source relists, missing nothing. And JobSets
(the CRD installed, no controller): sourced with the gang summed over replicated jobs."""

from __future__ import annotations

import json
import urllib.request
import uuid
from typing import Any

import pytest
from kube_cluster import ADMIN_TOKEN, KubeCluster
from kube_control_plane import wait_for
from test_kube_source import suspended_job

from actuators.kube import api_client
from actuators.kube.reflector import Backoff
from actuators.kube.source import KubernetesSource

pytestmark = [pytest.mark.kubernetes, pytest.mark.timeout(2400)]


def new_namespace(admin: Any) -> str:
    from kubernetes import client

    ns = f"rec-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(admin).create_namespace({"metadata": {"name": ns}})
    return ns


def job_ids(source: KubernetesSource) -> set[str]:
    return {w.job_id for w in source.view.workloads.values()}


def test_watches_back_off_while_the_api_server_is_down_and_resume(kube_cluster: KubeCluster) -> None:
    from kubernetes import client

    admin = api_client(kube_cluster.configuration(ADMIN_TOKEN))
    ns = new_namespace(admin)
    api = api_client(kube_cluster.configuration(ADMIN_TOKEN))
    source = KubernetesSource(
        api, cluster="t", namespaces=[ns], backoff=Backoff(0.1, 0.5), watch_timeout_s=30
    )
    source.start()
    try:
        kube_cluster.stop_apiserver()
        wait_for(
            "the reflectors to see the outage", lambda: sum(r.stats.errors for r in source.reflectors) > 0
        )
        kube_cluster.start_apiserver()
        client.BatchV1Api(admin).create_namespaced_job(ns, suspended_job("after", "j-after", 1))
        wait_for("the Job created after the outage", lambda: "j-after" in job_ids(source), timeout_s=30)
    finally:
        source.stop()
        client.CoreV1Api(admin).delete_namespace(ns)


def compact_etcd(cluster: KubeCluster, revision: int) -> None:
    """etcd's own compaction (its v3 JSON gateway), as the API server runs it every 5 minutes."""
    body = json.dumps({"revision": revision, "physical": True}).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{cluster.etcd_port}/v3/kv/compaction", data=body, method="POST"
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200


def test_a_compacted_resource_version_is_gone_and_the_source_relists(kube_cluster: KubeCluster) -> None:
    from kubernetes import client

    admin = api_client(kube_cluster.configuration(ADMIN_TOKEN))
    batch = client.BatchV1Api(admin)
    ns = new_namespace(admin)
    batch.create_namespaced_job(ns, suspended_job("old", "j-old", 1))
    api = api_client(kube_cluster.configuration(ADMIN_TOKEN))
    source = KubernetesSource(
        api, cluster="t", namespaces=[ns], backoff=Backoff(0.1, 0.5), watch_timeout_s=30
    )
    source.start()
    (jobs,) = [r for r in source.reflectors if r.name == f"jobs/{ns}"]
    assert job_ids(source) == {"j-old"}
    source.stop()  # the source is away while the cluster moves on and etcd compacts its history
    batch.delete_namespaced_job("old", ns, propagation_policy="Background")
    batch.create_namespaced_job(ns, suspended_job("new", "j-new", 1))
    for i in range(3):
        batch.create_namespaced_job(ns, suspended_job(f"filler-{i}", f"j-filler-{i}", 1))
    compact_etcd(kube_cluster, int(batch.list_namespaced_job(ns).metadata.resource_version))
    stale = jobs.resource_version
    try:
        source.start()
        wait_for("the relist after 410 Gone", lambda: jobs.stats.relists_after_gone >= 1, timeout_s=30)
        assert jobs.stats.errors == 0, jobs.stats.last_error
        assert jobs.resource_version != stale
        assert job_ids(source) == {"j-new", "j-filler-0", "j-filler-1", "j-filler-2"}
        assert {w.job_id for w in source.view.cancelled_workloads()} == {"j-old"}, (
            "gone while away: cancelled"
        )
    finally:
        source.stop()
        client.CoreV1Api(admin).delete_namespace(ns)


def test_jobsets_are_sourced_with_the_gang_summed_over_replicated_jobs(kube_cluster: KubeCluster) -> None:
    from kubernetes import client
    from test_kube_real import install_jobset_crd

    admin = api_client(kube_cluster.configuration(ADMIN_TOKEN))
    install_jobset_crd(admin)
    ns = new_namespace(admin)
    custom = client.CustomObjectsApi(admin)

    def replicated(name: str, replicas: int, parallelism: int, gpus: int) -> dict[str, Any]:
        container = {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
        pod = {
            "restartPolicy": "Never",
            "containers": [container],
            "nodeSelector": {"ebbtide.io/pool": "pool-a"},
        }
        job = {"parallelism": parallelism, "completions": parallelism, "template": {"spec": pod}}
        return {"name": name, "replicas": replicas, "template": {"spec": job}}

    body = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": "js",
            "labels": {"ebbtide.io/job-id": "j-js"},
            "annotations": {"ebbtide.io/estimated-gpu-hours": "3"},
        },
        "spec": {
            "suspend": True,
            "replicatedJobs": [replicated("workers", 2, 1, 2), replicated("driver", 1, 2, 1)],
        },
    }
    custom.create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", ns, "jobsets", body)
    api = api_client(kube_cluster.configuration(ADMIN_TOKEN))
    source = KubernetesSource(
        api, cluster="t", namespaces=[ns], backoff=Backoff(0.1, 0.5), watch_timeout_s=30
    )
    source.start()
    try:
        job = source.snapshot().jobs["j-js"]
        assert (job.phase, job.spec.gpus, job.spec.allowed_pools) == ("held", 2 * 2 + 2 * 1, ["pool-a"])
        custom.patch_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", ns, "jobsets", "js", {"spec": {"suspend": False}}
        )
        wait_for("the JobSet running", lambda: source.snapshot().jobs["j-js"].phase == "running")
    finally:
        source.stop()
        client.CoreV1Api(admin).delete_namespace(ns)


def test_a_relist_replaces_only_its_own_namespace_and_kind(kube_cluster: KubeCluster) -> None:
    """Found by running the tests together: the JobSet reflector's relist once replaced the Jobs too."""
    from kubernetes import client
    from test_kube_real import install_jobset_crd

    admin = api_client(kube_cluster.configuration(ADMIN_TOKEN))
    install_jobset_crd(admin)
    batch = client.BatchV1Api(admin)
    first, second = new_namespace(admin), new_namespace(admin)
    batch.create_namespaced_job(first, suspended_job("one", "j-one", 1))
    batch.create_namespaced_job(second, suspended_job("two", "j-two", 1))
    api = api_client(kube_cluster.configuration(ADMIN_TOKEN))
    source = KubernetesSource(api, cluster="t", namespaces=[first, second], watch_timeout_s=30)
    source.start()
    try:
        assert job_ids(source) == {"j-one", "j-two"}
        for reflector in source.reflectors:  # every list again, in any order: nothing lost
            reflector.relist()
        assert job_ids(source) == {"j-one", "j-two"}
        assert source.view.cancelled_workloads() == []
    finally:
        source.stop()
        for ns in (first, second):
            client.CoreV1Api(admin).delete_namespace(ns)

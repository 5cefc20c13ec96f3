"""The Helm chart's RBAC, applied to a real API server: the actuator and the source work under their
own service accounts' tokens with the chart's defaults, no 403.

helm (scripts/install_deploy_tools.sh) renders the chart with its default values into a release
namespace; its ServiceAccounts, Roles, RoleBindings, ClusterRoles and ClusterRoleBindings are
created as rendered; tokens come from the TokenRequest API. The actuator and the source are built
from the env the chart gives their pods (EBBTIDE_ACTUATOR__KUBERNETES__NAMESPACES), so a mismatch
between where the chart grants rights and where the services look fails here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_cluster import ADMIN_TOKEN, KubeCluster
from test_kube_real import batch_job, deployment

from actuators.engine import ActuationEngine, RetryPolicy, results_by_target
from actuators.kube import KubernetesBackend, api_client
from actuators.kube.events import REASON_INVALID
from actuators.kube.jobspec import ANN_GPU_HOURS
from actuators.kube.source import KubernetesSource

pytestmark = [pytest.mark.kubernetes, pytest.mark.timeout(2400)]

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "ebbtide"
HELM_CACHE = Path(os.environ.get("EBBTIDE_CACHE_DIR", Path.home() / ".cache" / "ebbtide")) / "bin" / "helm"
RBAC_KINDS = ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")


def rendered(release: str, namespace: str) -> list[dict[str, Any]]:
    helm = shutil.which("helm") or (str(HELM_CACHE) if HELM_CACHE.exists() else None)
    if helm is None:
        pytest.skip("helm is not installed: run scripts/install_deploy_tools.sh")
    args = [helm, "template", release, str(CHART), "--namespace", namespace, "--kube-version", "1.34.0"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120, check=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def apply_rbac(admin: Any, docs: list[dict[str, Any]], namespace: str) -> None:
    from kubernetes import client

    core, rbac = client.CoreV1Api(admin), client.RbacAuthorizationV1Api(admin)
    create = {
        "ServiceAccount": lambda d: core.create_namespaced_service_account(
            d["metadata"].get("namespace", namespace), d
        ),
        "Role": lambda d: rbac.create_namespaced_role(d["metadata"]["namespace"], d),
        "RoleBinding": lambda d: rbac.create_namespaced_role_binding(d["metadata"]["namespace"], d),
        "ClusterRole": rbac.create_cluster_role,
        "ClusterRoleBinding": rbac.create_cluster_role_binding,
    }
    for kind in RBAC_KINDS:
        for doc in docs:
            if doc["kind"] == kind:
                create[kind](doc)


def token_for(admin: Any, namespace: str, account: str) -> str:
    from kubernetes import client

    request = {"spec": {"audiences": ["https://kubernetes.default.svc"], "expirationSeconds": 3600}}
    answer = client.CoreV1Api(admin).create_namespaced_service_account_token(account, namespace, request)
    return str(answer.status.token)


def env_of(docs: list[dict[str, Any]], component: str) -> dict[str, str]:
    (workload,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith(component)]
    return {
        e["name"]: e.get("value", "") for e in workload["spec"]["template"]["spec"]["containers"][0]["env"]
    }


def test_actuator_and_source_under_the_charts_rbac_defaults(
    kube_cluster: KubeCluster, make_allocation
) -> None:
    from kubernetes import client

    admin = api_client(kube_cluster.configuration(ADMIN_TOKEN))
    tag = uuid.uuid4().hex[:6]
    release, ns = f"r{tag}", f"ebbtide-{tag}"
    client.CoreV1Api(admin).create_namespace({"metadata": {"name": ns}})
    docs = rendered(release, ns)
    apply_rbac(admin, docs, ns)
    namespaces = json.loads(env_of(docs, "actuator")["EBBTIDE_ACTUATOR__KUBERNETES__NAMESPACES"])
    assert (
        namespaces == json.loads(env_of(docs, "source")["EBBTIDE_ACTUATOR__KUBERNETES__NAMESPACES"]) == [ns]
    )
    job = batch_job("train", "job-1", 2)
    job["metadata"]["annotations"] = {ANN_GPU_HOURS: "4"}
    client.BatchV1Api(admin).create_namespaced_job(ns, job)
    client.BatchV1Api(admin).create_namespaced_job(ns, batch_job("no-estimate", "job-2", 1))
    client.AppsV1Api(admin).create_namespaced_deployment(ns, deployment("chat-a", "chat", "pool-a", 1))

    accounts = {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"}
    actuator_api = api_client(kube_cluster.configuration(token_for(admin, ns, f"{release}-ebbtide-actuator")))
    source_api = api_client(kube_cluster.configuration(token_for(admin, ns, f"{release}-ebbtide-source")))
    assert {f"{release}-ebbtide-actuator", f"{release}-ebbtide-source"} <= accounts

    backend = KubernetesBackend(actuator_api, cluster="test", namespace=namespaces, request_timeout_s=5)
    engine = ActuationEngine(
        backend, "test", retry=RetryPolicy(attempts=1, base_delay_s=0.1, max_delay_s=0.1)
    )
    allocation = make_allocation(
        "p1", jobs=[("job-1", "run", "pool-a", 2)], services=[("chat", "pool-a", 2, 2.0)]
    )
    results = results_by_target(engine.apply(allocation))
    assert {r.outcome for r in results.values()} == {"applied"}, {t: r.error for t, r in results.items()}

    source = KubernetesSource(source_api, cluster="test", namespaces=namespaces, watch_timeout_s=30)
    source.start(sync_timeout_s=30)
    try:
        snap = source.snapshot()
        assert snap.jobs["job-1"].phase == "running"
        assert [s.service for s in snap.inventory.services] == ["chat"]
        assert "job-2" not in snap.jobs  # its Event (the source may create Events) is checked below
        events = client.CoreV1Api(admin).list_namespaced_event(ns).items
        assert [e.reason for e in events if e.involved_object.name == "no-estimate"] == [REASON_INVALID]
        errors = {r.name: r.stats.last_error for r in source.reflectors if r.stats.errors}
        # JobSets are not installed here: a 404 after RBAC allowed the list, nothing else
        assert all("HTTP 404" in str(e) for e in errors.values()), errors
        assert not [e for e in errors.values() if "403" in str(e)]
    finally:
        source.stop()

"""Fixtures for the actuator tests: a real private Slurm cluster, a real kube-apiserver, allocations."""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

# This directory (slurm_cluster helper) and the repo root: a tests/<part>/ folder without an
# __init__.py (e.g. tests/schemas) would otherwise shadow the real package of that name.
sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2])]

from kube_cluster import ACTUATOR_USER, ADMIN_TOKEN, KubeCluster, build_kube_apiserver  # noqa: E402
from kube_control_plane import ControlPlane, build_control_plane  # noqa: E402
from slurm_cluster import SlurmCluster, install_slurm  # noqa: E402

from actuators.kube import api_client  # noqa: E402
from schemas import Allocation, JobAction, JobDecision, ServiceDecision  # noqa: E402

POOLS = {"pool-a": ["a1", "a2"], "pool-b": ["b1", "b2"]}


@pytest.fixture(scope="session")
def slurm_installed() -> None:
    reason = install_slurm()
    if reason is not None:
        pytest.skip(f"Slurm is not installed: {reason}")


@pytest.fixture
def slurm_cluster(slurm_installed: None) -> Iterator[SlurmCluster]:
    """A fresh cluster per test: 2 partitions (pools) x 2 nodes x 8 fake GPUs."""
    yield from _running(SlurmCluster(root=Path(tempfile.mkdtemp(prefix="ebbtide-slurm-")), pools=POOLS))


def _running(cluster: SlurmCluster) -> Iterator[SlurmCluster]:
    root = cluster.root
    t0 = time.monotonic()
    try:
        cluster.start()
    except Exception:
        cluster.stop()
        logs = "\n".join(p.read_text(errors="replace")[-800:] for p in (root / "log").glob("*.out"))
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"Slurm daemons did not start:\n{logs}") from None
    cluster.start_s = time.monotonic() - t0  # type: ignore[attr-defined]
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def accounted_cluster(slurm_installed: None) -> Iterator[SlurmCluster]:
    """The same cluster keeping accounting (slurmdbd on a private MariaDB, so sacct answers) and
    forgetting ended jobs after 2 s, so they leave squeue."""
    if shutil.which("slurmdbd") is None or shutil.which("mariadbd") is None:
        pytest.skip("slurmdbd or mariadb-server is not installed (scripts/install_slurm.sh installs them)")
    yield from _running(SlurmCluster(root=Path(tempfile.mkdtemp(prefix="ebbtide-slurm-")), pools=POOLS,
                                     accounting=True, min_job_age_s=2))  # fmt: skip


@pytest.fixture(scope="session")
def kube_cluster() -> Iterator[KubeCluster]:
    """A real kube-apiserver on its own etcd, once per session (built and cached by the script)."""
    binary, reason = build_kube_apiserver()
    if binary is None:
        pytest.skip(f"kube-apiserver is not available: {reason}")
    root = Path(tempfile.mkdtemp(prefix="ebbtide-kube-"))
    cluster = KubeCluster(root=root, binary=binary)
    try:
        cluster.start()
    except Exception:
        cluster.stop()
        logs = "\n".join(p.read_text(errors="replace")[-1500:] for p in root.glob("*.log"))
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"kube-apiserver did not start:\n{logs}") from None
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def kube_control_plane() -> Iterator[ControlPlane]:
    """A second real API server with controller-manager (Job controller), scheduler and KWOK nodes.

    Apart from ``kube_cluster`` so the controller-free tests keep a cluster where nothing else writes.
    """
    binary, reason = build_kube_apiserver()
    if binary is None:
        pytest.skip(f"kube-apiserver is not available: {reason}")
    binaries, reason = build_control_plane()
    if binaries is None:
        pytest.skip(f"the Kubernetes control plane is not available: {reason}")
    root = Path(tempfile.mkdtemp(prefix="ebbtide-kcp-"))
    cluster = KubeCluster(root=root, binary=binary)
    plane = ControlPlane(cluster=cluster, binaries=binaries)
    try:
        cluster.start()
        plane.start()
    except Exception:
        cluster.stop()
        logs = "\n".join(p.read_text(errors="replace")[-1500:] for p in root.glob("*.log"))
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"the control plane did not start:\n{logs}") from None
    try:
        yield plane
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


RBAC_FILE = Path(__file__).resolve().parents[2] / "deploy" / "rbac" / "actuator.yaml"


@pytest.fixture
def namespace(kube_cluster: KubeCluster) -> Iterator[str]:
    """A fresh namespace with deploy/rbac/actuator.yaml's Role bound to the actuator's user."""
    from kubernetes import client

    admin = api_client(kube_cluster.configuration(ADMIN_TOKEN))
    name = f"t-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(admin).create_namespace({"metadata": {"name": name}})
    rbac = client.RbacAuthorizationV1Api(admin)
    for doc in yaml.safe_load_all(RBAC_FILE.read_text()):
        subjects = [{"kind": "User", "name": ACTUATOR_USER, "apiGroup": "rbac.authorization.k8s.io"}]
        if doc["kind"] == "Role":
            rbac.create_namespaced_role(name, {**doc, "metadata": {**doc["metadata"], "namespace": name}})
        elif doc["kind"] == "RoleBinding":
            rbac.create_namespaced_role_binding(
                name, {**doc, "metadata": {**doc["metadata"], "namespace": name}, "subjects": subjects}
            )
        elif doc["kind"] in {"ClusterRole", "ClusterRoleBinding"}:
            body = {**doc, "subjects": subjects} if doc["kind"] == "ClusterRoleBinding" else doc
            create = (
                rbac.create_cluster_role if doc["kind"] == "ClusterRole" else rbac.create_cluster_role_binding
            )
            try:
                create(body)
            except client.ApiException as exc:
                if exc.status != 409:
                    raise
    yield name
    client.CoreV1Api(admin).delete_namespace(name)


@pytest.fixture
def admin(kube_cluster: KubeCluster) -> Any:
    return api_client(kube_cluster.configuration(ADMIN_TOKEN))


AllocationFactory = Callable[..., Allocation]


@pytest.fixture
def make_allocation() -> AllocationFactory:
    """Allocations from tuples: jobs (job_id, action, pool, gpus), services (service, pool, replicas, gpus)"""

    def make(
        plan_id: str,
        *,
        jobs: Sequence[tuple[str, str, str | None, int]] = (),
        services: Sequence[tuple[str, str, int, float]] = (),
        cluster: str = "test",
        valid_s: int = 900,
        issued_at: datetime | None = None,
    ) -> Allocation:
        issued = issued_at or datetime.now(UTC).replace(microsecond=0)
        return Allocation(
            cluster=cluster,
            plan_id=plan_id,
            policy="test",
            issued_at=issued,
            step_s=900,
            valid_until=issued + timedelta(seconds=valid_s),
            services=[
                ServiceDecision(service=s, pool=p, replicas=r, gpus=g, reason="test")
                for s, p, r, g in services
            ],
            jobs=[
                JobDecision(job_id=j, action=JobAction(a), pool=p, gpus=n, reason="test")
                for j, a, p, n in jobs
            ],
        )

    return make

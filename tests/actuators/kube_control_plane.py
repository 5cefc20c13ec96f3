"""Test support: the rest of a real control plane around tests/actuators/kube_cluster.py's API server.

What runs, all real, built by scripts/build_kube_apiserver.sh and scripts/build_kwok.sh:

- kube-controller-manager with the Job controller (and the garbage collector, Deployment and
  ReplicaSet controllers, so a Deployment gets pods and a deleted Job loses them, and the node
  lifecycle controller, which lifts the ``node.kubernetes.io/not-ready`` taint the API server puts
  on every new node once KWOK reports it Ready); no leader election, no serving port;
  authenticated with the admin token through a kubeconfig file;
- kube-scheduler (default profile: it binds pods to nodes with room for their requests, GPUs
  included, as on a real cluster);
- KWOK (sigs.k8s.io/kwok), which plays the kubelets of the nodes created by :meth:`add_gpu_nodes`
  (annotated ``kwok.x-k8s.io/node: fake``, allocatable ``nvidia.com/gpu``): it marks them Ready,
  runs their pods, and completes a Job's pod after the duration in its annotation
  ``pod-complete.stage.kwok.x-k8s.io/delay`` (tests/actuators/kwok/stages.yaml).

No kubelet, container runtime or network: pods never run a process. What the API server stores
(bindings, pod phases, Job conditions) is what real controllers wrote.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kube_cluster import ADMIN_TOKEN, CACHE_DIR, REPO_ROOT, KubeCluster

KWOK_BUILD_SCRIPT = REPO_ROOT / "scripts" / "build_kwok.sh"
KWOK_STAGES = Path(__file__).resolve().parent / "kwok" / "stages.yaml"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
COMPLETE_DELAY_ANNOTATION = "pod-complete.stage.kwok.x-k8s.io/delay"
CONTROLLERS = ",".join(
    (
        "job-controller",
        "garbage-collector-controller",
        "deployment-controller",
        "replicaset-controller",
        "node-lifecycle-controller",  # lifts the not-ready taint the API server puts on a new node
    )
)


def build_control_plane() -> tuple[dict[str, Path] | None, str]:
    """Build (cached) controller-manager, scheduler and KWOK; return their paths or why not."""
    names = ("kube-controller-manager", "kube-scheduler", "kwok")
    for script in (REPO_ROOT / "scripts" / "build_kube_apiserver.sh", KWOK_BUILD_SCRIPT):
        if all((CACHE_DIR / n).exists() for n in names):
            break
        try:
            proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=3000)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"{script.name} could not run: {exc}"
        if proc.returncode != 0:
            return None, f"{script.name} failed: {proc.stderr.strip()[-400:]}"
    missing = [n for n in names if not (CACHE_DIR / n).exists()]
    if missing:
        return None, f"not built: {', '.join(missing)} (in {CACHE_DIR})"
    return {n: CACHE_DIR / n for n in names}, ""


def write_kubeconfig(cluster: KubeCluster, path: Path, token: str = ADMIN_TOKEN) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: test\n  cluster:\n    server: {cluster.url}\n"
        f"    certificate-authority: {cluster.root / 'certs' / 'apiserver.crt'}\n"
        f"users:\n- name: user\n  user:\n    token: {token}\n"
        "contexts:\n- name: test\n  context: {cluster: test, user: user}\n"
        "current-context: test\n"
    )
    return path


@dataclass
class ControlPlane:
    """Controller-manager, scheduler and KWOK attached to a running :class:`KubeCluster`."""

    cluster: KubeCluster
    binaries: dict[str, Path]
    kubeconfig: Path = field(init=False)
    names: list[str] = field(default_factory=list)

    def start(self) -> None:
        root = self.cluster.root
        self.kubeconfig = write_kubeconfig(self.cluster, root / "admin.kubeconfig")
        kc = str(self.kubeconfig)
        self._spawn(
            "kube-controller-manager",
            [
                str(self.binaries["kube-controller-manager"]),
                f"--kubeconfig={kc}",
                f"--controllers={CONTROLLERS}",
                "--leader-elect=false",
                "--secure-port=0",
                "--concurrent-job-syncs=10",
                "--v=0",
            ],
        )
        self._spawn(
            "kube-scheduler",
            [
                str(self.binaries["kube-scheduler"]),
                f"--kubeconfig={kc}",
                "--leader-elect=false",
                "--secure-port=0",
            ],
        )
        self._spawn(
            "kwok",
            [
                str(self.binaries["kwok"]),
                f"--kubeconfig={kc}",
                f"--config={KWOK_STAGES}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
                "--node-lease-duration-seconds=40",
                "--cidr=10.244.0.0/16",
                "--node-ip=10.1.0.1",
            ],
        )
        time.sleep(0.5)
        for name in self.names:
            proc = self.cluster.processes[name]
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited: {(root / f'{name}.log').read_text()[-1500:]}")

    def _spawn(self, name: str, argv: list[str]) -> None:
        self.cluster._spawn(name, argv)
        self.names.append(name)

    def stop(self) -> None:
        for name in reversed(self.names):
            self.cluster._stop(name)
        self.names.clear()


def gpu_node(name: str, pool: str, gpus: int, gpu_type: str = "NVIDIA-A100") -> dict[str, Any]:
    """A Node KWOK manages, with ``gpus`` allocatable ``nvidia.com/gpu`` in pool ``pool``."""
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "type": "kwok",
                "ebbtide.io/pool": pool,
                "nvidia.com/gpu.product": gpu_type,
            },
        },
        "status": {"allocatable": resources, "capacity": resources},
    }


def wait_for(what: str, check: Any, timeout_s: float = 60.0, every_s: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")

"""Test support: the real Kueue manager (sigs.k8s.io/kueue v0.17, scripts/build_kueue.sh) on the
control plane of tests/actuators/kube_control_plane.py.

Kueue runs as a host process with a kubeconfig to the test API server, managing batch/v1 Jobs
that carry the ``kueue.x-k8s.io/queue-name`` label. Its CRDs come from the module's
config/components/crd/bases (copied by the build script). Webhooks: the API server cannot reach a
Service without a pod network, so no webhook configuration is registered, and Jobs are created
already suspended, with their queue label (what Kueue's mutating webhook would otherwise do).
Kueue's internal certificate management is off (it would wait for webhook configurations to inject
its CA into); its webhook server still starts, on 127.0.0.1 with a self-signed certificate, and
its metrics server is off, though Kueue v0.17 reads a metrics certificate from the fixed
/etc/kueue/metrics/certs whenever internal certificates are off: one is written there if absent.
The visibility API server (an aggregated API) is off (feature gate VisibilityOnDemand=false).
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kube_cluster import CACHE_DIR, REPO_ROOT, _free_port
from kube_control_plane import ControlPlane

KUEUE_BUILD_SCRIPT = REPO_ROOT / "scripts" / "build_kueue.sh"
KUEUE_CRDS = CACHE_DIR.parent / "kueue-crds"
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")  # fixed in Kueue v0.17's cmd/kueue/main.go
KUEUE_NAMESPACE = "kueue-system"


def build_kueue() -> tuple[Path | None, str]:
    """Build (cached) Kueue's manager; return its path or why not."""
    binary = CACHE_DIR / "kueue"
    if not (binary.exists() and KUEUE_CRDS.is_dir()):
        try:
            proc = subprocess.run(
                ["bash", str(KUEUE_BUILD_SCRIPT)], capture_output=True, text=True, timeout=3000
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"{KUEUE_BUILD_SCRIPT.name} could not run: {exc}"
        if proc.returncode != 0:
            return None, f"{KUEUE_BUILD_SCRIPT.name} failed: {proc.stderr.strip()[-400:]}"
    if not binary.exists():
        return None, f"not built: {binary}"
    return binary, ""


def self_signed(directory: Path, name: str = "tls") -> None:
    """A self-signed certificate for 127.0.0.1 as ``<name>.crt`` and ``<name>.key`` in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30", "-subj", "/CN=kueue",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(directory / f"{name}.key"),
         "-out", str(directory / f"{name}.crt")],
        check=True, capture_output=True,
    )  # fmt: skip


def kueue_config(webhook_port: int, cert_dir: Path) -> dict[str, Any]:
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": "0"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": ["batch/job"]},
    }


@dataclass
class KueueManager:
    """Kueue's CRDs installed on ``plane``'s API server and its manager running beside it."""

    plane: ControlPlane
    binary: Path
    name: str = "kueue"

    def start(self, admin: Any) -> None:
        """Install the CRDs (``admin``: an ApiClient with admin rights) and start the manager."""
        from kubernetes import client

        install_crds(admin)
        try:
            client.CoreV1Api(admin).create_namespace({"metadata": {"name": KUEUE_NAMESPACE}})
        except client.ApiException as exc:
            if exc.status != 409:
                raise
        root = self.plane.cluster.root
        cert_dir = root / "kueue-webhook-certs"
        self_signed(cert_dir)
        if not (METRICS_CERT_DIR / "tls.crt").exists():
            self_signed(METRICS_CERT_DIR)
        config = root / "kueue-config.yaml"
        config.write_text(yaml.safe_dump(kueue_config(_free_port(), cert_dir)))
        argv = [str(self.binary), f"--config={config}", f"--kubeconfig={self.plane.kubeconfig}",
                "--feature-gates=VisibilityOnDemand=false", "--zap-log-level=info"]  # fmt: skip
        self.plane.cluster._spawn(self.name, argv)
        time.sleep(1.0)
        proc = self.plane.cluster.processes[self.name]
        if proc.poll() is not None:
            raise RuntimeError(f"kueue exited: {(root / 'kueue.log').read_text()[-2000:]}")

    def log_tail(self, chars: int = 3000) -> str:
        return (self.plane.cluster.root / f"{self.name}.log").read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        self.plane.cluster._stop(self.name)


def install_crds(admin: Any, timeout_s: float = 30.0) -> None:
    """Create Kueue's CRDs (once per API server) and wait until each is Established."""
    from kubernetes import client

    api = client.ApiextensionsV1Api(admin)
    names = []
    for path in sorted(KUEUE_CRDS.glob("*.yaml")):
        body = yaml.safe_load(path.read_text())
        names.append(body["metadata"]["name"])
        try:
            api.create_custom_resource_definition(body)
        except client.ApiException as exc:
            if exc.status != 409:
                raise
    deadline = time.monotonic() + timeout_s
    for name in names:
        while not _established(api.read_custom_resource_definition(name)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"CRD {name} not Established in {timeout_s} s")
            time.sleep(0.2)


def _established(crd: Any) -> bool:
    return any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or []))

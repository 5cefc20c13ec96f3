"""Test support: a real kube-apiserver (built by scripts/build_kube_apiserver.sh) on a private etcd.

No controllers run (no controller-manager, no scheduler, no kubelet): the API server validates,
stores and serves objects, enforces RBAC, and that is what the actuator talks to. Two static
tokens: ``admin`` (system:masters) for the fixtures, and ``ebbtide-actuator`` whose rights come
only from deploy/rbac/, so the tests also prove the RBAC is sufficient.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from daemons import stop_daemon

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "scripts" / "build_kube_apiserver.sh"
CACHE_DIR = Path(os.environ.get("EBBTIDE_CACHE_DIR", Path.home() / ".cache" / "ebbtide")) / "kube" / "bin"
ADMIN_TOKEN = "ebbtide-test-admin-token"
ACTUATOR_TOKEN = "ebbtide-test-actuator-token"
ACTUATOR_USER = "ebbtide-actuator"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def build_kube_apiserver() -> tuple[Path | None, str]:
    """Run the build script (cached); return (binary, '') or (None, why not)."""
    binary = CACHE_DIR / "kube-apiserver"
    if not binary.exists():
        try:
            proc = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=3000)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"scripts/build_kube_apiserver.sh could not run: {exc}"
        if proc.returncode != 0:
            return None, f"scripts/build_kube_apiserver.sh failed: {proc.stderr.strip()[-400:]}"
    if not binary.exists():
        return None, f"no kube-apiserver at {binary}"
    if subprocess.run(["which", "etcd"], capture_output=True).returncode != 0:
        return None, "etcd not installed (apt-get install etcd-server)"
    return binary, ""


@dataclass
class KubeCluster:
    root: Path
    binary: Path
    port: int = 0
    etcd_port: int = 0
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 (kept open with the process)
        self.processes[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        key = self.root / "sa.key"
        if not key.exists():
            subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
            subprocess.run(
                ["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(self.root / "sa.pub")],
                check=True,
                capture_output=True,
            )
        (self.root / "tokens.csv").write_text(
            f"{ADMIN_TOKEN},admin,admin-uid,system:masters\n{ACTUATOR_TOKEN},{ACTUATOR_USER},actuator-uid\n"
        )
        self.etcd_port, peer = _free_port(), _free_port()
        self._spawn(
            "etcd",
            [
                "etcd",
                "--data-dir",
                str(self.root / "etcd"),
                "--listen-client-urls",
                f"http://127.0.0.1:{self.etcd_port}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{self.etcd_port}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-cluster",
                f"default=http://127.0.0.1:{peer}",
                "--log-level",
                "warn",
            ],
        )
        self.port = _free_port()
        self.start_apiserver()

    def start_apiserver(self, timeout_s: float = 90.0) -> None:
        self._spawn(
            "kube-apiserver",
            [
                str(self.binary),
                f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
                f"--secure-port={self.port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--cert-dir={self.root / 'certs'}",
                f"--token-auth-file={self.root / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={self.root / 'sa.pub'}",
                f"--service-account-signing-key-file={self.root / 'sa.key'}",
                "--disable-admission-plugins=ServiceAccount",
                "--enable-priority-and-fairness=false",
                "--watch-cache=false",
                "--v=0",
            ],
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.ready():
                return
            proc = self.processes["kube-apiserver"]
            if proc.poll() is not None:
                raise RuntimeError(
                    f"kube-apiserver exited: {(self.root / 'kube-apiserver.log').read_text()[-1500:]}"
                )
            time.sleep(0.3)
        raise RuntimeError(f"kube-apiserver not ready in {timeout_s} s")

    def ready(self) -> bool:
        import ssl
        import urllib.request

        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        req = urllib.request.Request(f"{self.url}/readyz", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def stop_apiserver(self) -> None:
        self._stop("kube-apiserver")

    def stop(self) -> None:
        for name in reversed(list(self.processes)):
            self._stop(name)

    def _stop(self, name: str) -> None:
        stop_daemon(self.processes, name, timeout_s=15)

    def configuration(self, token: str):  # type: ignore[no-untyped-def]
        from kubernetes import client

        conf = client.Configuration()
        conf.host = self.url
        conf.ssl_ca_cert = str(self.root / "certs" / "apiserver.crt")  # self-signed by the API server
        conf.api_key = {"authorization": f"Bearer {token}"}
        return conf

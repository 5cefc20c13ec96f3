"""A private kube-apiserver on its own etcd for the Kubernetes benchmarks (``ebbtide bench-kube-source``).

The binary is the one scripts/build_kube_apiserver.sh builds and caches
(``~/.cache/ebbtide/kube/bin/kube-apiserver``); etcd is Debian's ``etcd-server``. One static admin
token, a self-signed serving certificate, no controllers: the benchmark writes the objects itself.
Everything lives in a temporary folder removed on exit.
"""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

BIN_DIR = Path(os.environ.get("EBBTIDE_CACHE_DIR", Path.home() / ".cache" / "ebbtide")) / "kube" / "bin"
TOKEN = "ebbtide-bench-admin-token"


@dataclass(frozen=True)
class ApiServer:
    url: str
    token: str
    ca_file: Path


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ready(url: str) -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    req = urllib.request.Request(f"{url}/readyz", headers={"Authorization": f"Bearer {TOKEN}"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def _apiserver_argv(binary: Path, root: Path, etcd_port: int, port: int) -> list[str]:
    return [
        str(binary),
        f"--etcd-servers=http://127.0.0.1:{etcd_port}",
        f"--secure-port={port}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--cert-dir={root / 'certs'}",
        f"--token-auth-file={root / 'tokens.csv'}",
        "--authorization-mode=RBAC",
        "--service-cluster-ip-range=10.0.0.0/24",
        "--service-account-issuer=https://kubernetes.default.svc",
        f"--service-account-key-file={root / 'sa.key'}",
        f"--service-account-signing-key-file={root / 'sa.key'}",
        "--disable-admission-plugins=ServiceAccount",
        "--enable-priority-and-fairness=false",
        "--v=0",
    ]


@contextmanager
def local_apiserver(timeout_s: float = 90.0) -> Iterator[ApiServer]:
    """Start etcd and kube-apiserver; yield how to reach it; stop both and remove their data."""
    binary = BIN_DIR / "kube-apiserver"
    if not binary.exists() or shutil.which("etcd") is None:
        raise RuntimeError(f"no {binary} or etcd: run scripts/build_kube_apiserver.sh first")
    root = Path(tempfile.mkdtemp(prefix="ebbtide-bench-kube-"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        subprocess.run(
            ["openssl", "genrsa", "-out", str(root / "sa.key"), "2048"], check=True, capture_output=True
        )
        (root / "tokens.csv").write_text(f"{TOKEN},admin,admin-uid,system:masters\n")
        etcd_port, peer, port = _port(), _port(), _port()
        etcd = ["etcd", "--data-dir", str(root / "etcd"), "--log-level", "warn",
                "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
                "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
                "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-cluster", f"default=http://127.0.0.1:{peer}"]  # fmt: skip
        log = open(root / "server.log", "ab")  # noqa: SIM115 (kept open with the processes)
        procs.append(subprocess.Popen(etcd, stdout=log, stderr=subprocess.STDOUT))
        argv = _apiserver_argv(binary, root, etcd_port, port)
        procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT))
        url, deadline = f"https://127.0.0.1:{port}", time.monotonic() + timeout_s
        while not _ready(url):
            if time.monotonic() > deadline or procs[-1].poll() is not None:
                raise RuntimeError(f"kube-apiserver not ready: {(root / 'server.log').read_text()[-1000:]}")
            time.sleep(0.3)
        yield ApiServer(url=url, token=TOKEN, ca_file=root / "certs" / "apiserver.crt")
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(root, ignore_errors=True)

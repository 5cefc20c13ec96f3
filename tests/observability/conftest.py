"""Fixtures of the observability tier: the real tools (promtool, Prometheus, helm), installed by
the project's own scripts when missing, and a Prometheus server on a free port."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CACHE_BIN = Path(os.environ.get("EBBTIDE_CACHE_DIR", Path.home() / ".cache" / "ebbtide")) / "bin"


def _tool(name: str, installer: str, extra_dirs: tuple[Path, ...] = ()) -> str:
    """The tool's path; runs the project's install script once when it is missing."""

    def find() -> str | None:
        for folder in extra_dirs:
            if (folder / name).is_file():
                return str(folder / name)
        return shutil.which(name)

    found = find()
    if found is None:
        script = ROOT / "scripts" / installer
        result = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=1200)
        found = find()
        if found is None:
            output = result.stdout + result.stderr
            pytest.fail(f"{name} is missing and {installer} did not install it:\n{output}")
    return found


@pytest.fixture(scope="session")
def promtool() -> str:
    return _tool("promtool", "install_prometheus.sh")


@pytest.fixture(scope="session")
def prometheus_binary() -> str:
    return _tool("prometheus", "install_prometheus.sh")


@pytest.fixture(scope="session")
def helm() -> str:
    return _tool("helm", "install_deploy_tools.sh", (CACHE_BIN,))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class PrometheusServer:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def api(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=5) as resp:
            body = json.loads(resp.read())
        assert body["status"] == "success", body
        return body["data"]

    def wait_for(self, what: str, probe: Callable[[], Any], timeout_s: float = 60.0) -> Any:
        """Poll ``probe`` until it returns something truthy (scrapes arrive after a few seconds)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"prometheus exited ({self.process.returncode}):\n{self.log.read_text()[-3000:]}")
            try:
                found = probe()
            except OSError:
                found = None
            if found:
                return found
            time.sleep(0.5)
        pytest.fail(f"{what}: not seen within {timeout_s} s; prometheus log:\n{self.log.read_text()[-3000:]}")


@pytest.fixture
def start_prometheus(prometheus_binary: str, tmp_path: Path) -> Iterator[Callable[[str], PrometheusServer]]:
    """Start a real Prometheus with the given YAML config (1 s scrape interval is the caller's)."""
    started: list[PrometheusServer] = []

    def start(config_yaml: str) -> PrometheusServer:
        config = tmp_path / "prometheus.yml"
        config.write_text(config_yaml)
        port = free_port()
        log = tmp_path / "prometheus.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [
                    prometheus_binary,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    "--log.level=warn",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        server = PrometheusServer(url=f"http://127.0.0.1:{port}", process=process, log=log)
        started.append(server)
        server.wait_for("prometheus ready", lambda: _ready(server.url), timeout_s=30)
        return server

    yield start
    for server in started:
        server.process.terminate()
        try:
            server.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait(timeout=10)


def _ready(url: str) -> bool:
    with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as resp:
        return resp.status == 200

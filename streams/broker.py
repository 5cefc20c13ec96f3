"""What every broker provider shares: the handle, readiness, ports, process control, cache folders.

A provider (external cluster, testcontainers, local Apache Kafka, embedded Tansu) gives a
:class:`BrokerHandle`: where to connect, what kind of broker it is, whether its transactions
are real, and how to stop it. Everything the loop's producers and consumers need starts here.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from streams.kafka_client import Brokers, client_config

BrokerKind = Literal["external", "testcontainers", "kafka", "tansu"]

READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0


class BrokerError(RuntimeError):
    """A broker could not be started, reached or stopped; the message says why (with its log tail)."""


@dataclass
class BrokerHandle:
    """A running (or reachable) broker."""

    bootstrap: str
    kind: BrokerKind
    transactions: bool
    name: str = "default"
    pid: int | None = None
    data_dir: Path | None = None
    log_file: Path | None = None
    _stopper: Callable[[], None] | None = field(default=None, repr=False)

    def stop(self) -> None:
        """Stop the broker if this handle started it; reaching an external one stops nothing."""
        if self._stopper is not None:
            stopper, self._stopper = self._stopper, None
            stopper()


def cache_root() -> Path:
    """``$EBBTIDE_CACHE_DIR`` or ``~/.cache/ebbtide``: jars, broker data and state files."""
    configured = os.environ.get("EBBTIDE_CACHE_DIR")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "ebbtide"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def log_tail(path: Path | None, lines: int = 40) -> str:
    if path is None or not path.exists():
        return "(no broker log)"
    text = path.read_text(errors="replace").splitlines()
    return "\n".join(text[-lines:]) or "(broker log is empty)"


def answers_metadata(bootstrap: Brokers, timeout_s: float = 3.0) -> bool:
    """True when a broker at ``bootstrap`` answers a metadata request and lists at least one broker."""
    from confluent_kafka.admin import AdminClient

    conf = client_config(bootstrap, {"logger": _probe_logger()})
    admin = AdminClient(conf)
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except Exception:
        return False
    return bool(metadata.brokers)


def _probe_logger() -> logging.Logger:
    """librdkafka logs connection refusals while a broker starts; readiness polling ignores them."""
    probe = logging.getLogger("streams.broker.probe")
    probe.setLevel(logging.CRITICAL)
    probe.propagate = False
    return probe


def wait_ready(
    bootstrap: Brokers,
    *,
    process: subprocess.Popen[bytes] | None,
    log_file: Path | None,
    timeout_s: float = READY_TIMEOUT_S,
    what: str = "broker",
) -> None:
    """Block until the broker answers a metadata request; fail clearly if it dies or times out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise BrokerError(
                f"{what} exited with status {process.returncode} before it was ready.\n"
                f"--- last lines of {log_file} ---\n{log_tail(log_file)}"
            )
        if answers_metadata(bootstrap, timeout_s=1.0):
            return
        time.sleep(0.2)
    raise BrokerError(
        f"{what} at {bootstrap} not ready after {timeout_s:.0f} s.\n"
        f"--- last lines of {log_file} ---\n{log_tail(log_file)}"
    )


def stop_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` asking Linux to SIGTERM the child when its parent dies (tests' brokers must
    not outlive a killed pytest). None where prctl is unavailable."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    pr_set_pdeathsig = 1

    def preexec() -> None:
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)

    return preexec


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still "exists"; treat it as gone.
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def handle_when_ready(
    process: subprocess.Popen[bytes],
    *,
    bootstrap: str,
    kind: BrokerKind,
    transactions: bool,
    name: str,
    data_dir: Path,
    log_file: Path,
    timeout_s: float,
    what: str,
    stop_timeout_s: float = STOP_TIMEOUT_S,
) -> BrokerHandle:
    """Wait for a broker process we started to answer; stop it and raise if it never does."""

    def stop() -> None:
        stop_process_group(process.pid, timeout_s=stop_timeout_s, process=process)

    try:
        wait_ready(bootstrap, process=process, log_file=log_file, timeout_s=timeout_s, what=what)
    except BrokerError:
        if process.poll() is None:
            stop_process_group(process.pid, timeout_s=min(stop_timeout_s, 5.0), process=process)
        raise
    return BrokerHandle(
        bootstrap=bootstrap,
        kind=kind,
        transactions=transactions,
        name=name,
        pid=process.pid,
        data_dir=data_dir,
        log_file=log_file,
        _stopper=stop,
    )


def stop_process_group(
    pid: int, timeout_s: float = STOP_TIMEOUT_S, process: subprocess.Popen[bytes] | None = None
) -> None:
    """SIGTERM the broker's process group (it was started in its own session), then SIGKILL after timeout."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, sig)
        deadline = time.monotonic() + (timeout_s if sig == signal.SIGTERM else 5.0)
        while time.monotonic() < deadline:
            if process is not None:
                if process.poll() is not None:
                    return
            elif not pid_alive(pid):
                return
            time.sleep(0.1)
    raise BrokerError(f"process {pid} did not stop after SIGKILL")

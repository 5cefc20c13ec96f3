"""Stopping the daemons the actuator fixtures start (Slurm, etcd, kube-apiserver): one way for all."""

from __future__ import annotations

import subprocess


def stop_daemon(processes: dict[str, subprocess.Popen[bytes]], name: str, timeout_s: float) -> None:
    """SIGTERM the named daemon, SIGKILL it if it has not exited after ``timeout_s``; forget it."""
    proc = processes.pop(name, None)
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)

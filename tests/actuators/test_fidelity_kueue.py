"""The simulated kueue-hpa baseline against the real Kueue v0.17 on the Kubernetes harness.

Real kube-apiserver, controller-manager (Job controller), kube-scheduler, KWOK nodes (2 x 8
nvidia.com/gpu) and Kueue's manager (tests/actuators/kueue_manager.py); the workload and the
comparison are bench/fidelity_kueue.py's, run as ``ebbtide bench-fidelity-kueue`` would.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_cluster import ADMIN_TOKEN
from kube_control_plane import ControlPlane, gpu_node, wait_for
from kueue_manager import KueueManager, build_kueue

from actuators.kube import api_client
from bench.fidelity_kueue import GPUS_PER_NODE, NODES, JobTimes, compare

pytestmark = [pytest.mark.e2e, pytest.mark.kubernetes, pytest.mark.kueue, pytest.mark.timeout(3600)]

STEP_REAL_S = float(os.environ.get("EBBTIDE_FIDELITY_STEP_S", "8"))
POOL = "fidelity-kueue"


@pytest.fixture
def kueue(kube_control_plane: ControlPlane) -> Iterator[tuple[KueueManager, Any, str]]:
    """Kueue running on the control plane, its nodes created and Ready, a fresh namespace."""
    from kubernetes import client

    binary, reason = build_kueue()
    if binary is None:
        pytest.skip(f"Kueue is not available: {reason}")
    admin = api_client(kube_control_plane.cluster.configuration(ADMIN_TOKEN))
    core = client.CoreV1Api(admin)
    names = [f"fid-{uuid.uuid4().hex[:6]}-{i}" for i in range(NODES)]
    for name in names:
        core.create_node(gpu_node(name, POOL, gpus=GPUS_PER_NODE))
    namespace = f"fid-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": namespace}})
    manager = KueueManager(plane=kube_control_plane, binary=binary)
    manager.start(admin)
    wait_for("the fidelity nodes Ready and untainted", lambda: all(_schedulable(core, n) for n in names))
    try:
        yield manager, admin, namespace
    finally:
        manager.stop()
        core.delete_namespace(namespace)
        for name in names:
            core.delete_node(name)


def _schedulable(core: Any, name: str) -> bool:
    node = core.read_node(name)
    ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
    return ready and not node.spec.taints


def test_kueue_admits_as_the_simulated_baseline(kueue: tuple[KueueManager, Any, str], tmp_path: Path) -> None:
    """``ebbtide bench-fidelity-kueue`` against the harness: its JSON, rebuilt into a report, and verdict."""
    import typer
    from typer.testing import CliRunner

    from ebbtide import cli_bench_fidelity_kueue

    app = typer.Typer()
    cli_bench_fidelity_kueue.register(app)
    app.command("noop")(lambda: None)  # a multi-command app, so the command is a subcommand

    manager, _, namespace = kueue
    cluster = manager.plane.cluster
    out = Path(os.environ.get("EBBTIDE_FIDELITY_JSON") or tmp_path / "fidelity-kueue.json")
    argv = ["bench-fidelity-kueue", "--server", cluster.url, "--token", ADMIN_TOKEN,
            "--ca-file", str(cluster.root / "certs" / "apiserver.crt"), "--namespace", namespace,
            "--pool", POOL, "--step-real-s", str(STEP_REAL_S), "--json", str(out)]  # fmt: skip
    result = CliRunner().invoke(app, argv)
    print(result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    figures = json.loads(out.read_text())
    report = compare(
        timeline(figures, "sim"), timeline(figures, "real"), step_real_s=STEP_REAL_S, kueue_version="v0.17.0"
    )
    summary = report.summary()
    assert summary["unfinished_real"] == [], manager.log_tail()
    # Same semantics, so the same decisions: every job admitted as often (the same preemptions) and
    # in the same order. The real times lag: each admission waits for the controllers (Kueue, the
    # Job controller, the scheduler, KWOK; about 0.3 of an 8 s step), and a job that waited for
    # another one inherits its lag, so it adds up along a chain (4 links at most here). That is the
    # time compression, not Kueue: at 1 step = 1 simulated minute the same lag is seconds a minute.
    assert summary["same_admission_counts"], summary
    assert summary["discordant_pairs"] == 0, (report.order("sim"), report.order("real"))
    assert summary["max_admission_lag_steps"] < 2.0, summary
    assert result.exit_code == 0, result.output


def timeline(figures: dict[str, Any], side: str) -> dict[str, JobTimes]:
    return {j["job_id"]: JobTimes(j[f"{side}_starts"], j[f"{side}_finish"]) for j in figures["jobs"]}

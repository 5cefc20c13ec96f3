"""The simulated priority-backfill baseline against Slurm's own scheduler on real daemons.

bench/fidelity_slurmsched.py runs one small workload (10 jobs, 2 priorities, gangs of 1-8 GPUs,
16 GPUs) through the simulator and through slurmctld (priority/multifactor, sched/backfill) with
time compressed. With Slurm's clock sped up as much as the runs are compressed (libfaketime), a
job's whole-minute time limit is its run, as the baseline's estimate is, and the two must agree:
the same start order, every start within one step (the baseline decides on step boundaries,
Slurm on events, a fraction of a step later). Without the fast clock Slurm believes each running
job has its whole limit left, and the second test pins the backfill that this artefact causes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console
from slurm_cluster import REPO_ROOT, SlurmCluster

from bench.fidelity_slurmsched import FidelityReport, render_table, run_fidelity

pytestmark = [pytest.mark.slurm, pytest.mark.e2e, pytest.mark.slow]

SPEEDUP = 20
"""Slurm's clock runs 20 times the wall: a simulated minute (one step) is 3 s real."""


def _cluster(speedup: int) -> Iterator[SlurmCluster]:
    root = Path(tempfile.mkdtemp(prefix="ebbtide-slurm-"))
    cluster = SlurmCluster(root=root, pools={"gpu": ["g1", "g2"]}, multifactor=True, clock_speedup=speedup)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def fast_clock_cluster(slurm_installed: None) -> Iterator[SlurmCluster]:
    if shutil.which("faketime") is None:
        pytest.skip("faketime is not installed (scripts/build_slurmsched.sh installs it)")
    yield from _cluster(SPEEDUP)


@pytest.fixture
def wall_clock_cluster(slurm_installed: None) -> Iterator[SlurmCluster]:
    yield from _cluster(1)


def show(report: FidelityReport) -> None:
    Console(width=150).print(render_table(report))


def test_slurm_starts_the_workload_in_the_baselines_order_within_a_step(
    fast_clock_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """``ebbtide bench-fidelity-slurm`` on the fast-clock cluster: its table, JSON and exit code."""
    out = tmp_path / "fidelity-slurm.json"
    argv = [sys.executable, "-m", "ebbtide.cli", "bench-fidelity-slurm", "--slurm-conf",
            str(fast_clock_cluster.conf), "--clock-speedup", str(SPEEDUP), "--json", str(out)]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    print(proc.stdout, proc.stderr)
    figures = json.loads(out.read_text())

    assert proc.returncode == 0
    assert figures["limits_match_runs"] is True
    assert figures["order_disagreements"] == []
    assert figures["kendall_tau_start"] > 0.95  # tau-b below 1 only from same-step ties
    late = {
        j["name"]: j["start_diff_steps"] for j in figures["jobs"] if not 0.0 <= j["start_diff_steps"] < 1.0
    }
    assert late == {}, "Slurm started these jobs earlier than the baseline or a step or more later"


def test_without_the_fast_clock_slurm_backfills_a_job_the_baseline_holds_for_the_reservation(
    wall_clock_cluster: SlurmCluster,
) -> None:
    """At step 2 the 8-GPU high-priority j04 waits for j02 (ends at step 3); j05 (2 GPUs, 2 steps)
    would end at step 4 and delay it, so the baseline holds it. Slurm on the wall clock sees j02
    2 s into its 3-minute limit, lets j05 in ahead of the reservation, and j04 starts late."""
    report = run_fidelity(wall_clock_cluster.env, partition="gpu", clock_speedup=1, scale_s=2.0)
    show(report)
    rows = {r.name: r for r in report.rows}

    assert not report.limits_match_runs
    assert ("j04", "j05") in report.order_disagreements()
    assert rows["j05"].slurm_start_step < rows["j04"].slurm_start_step
    assert rows["j04"].start_diff_steps >= 1.0

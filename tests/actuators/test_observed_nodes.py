"""Where running jobs sit: a Slurm job's nodes and GPUs read from its JSON, and the JobEvents that
carry them to the state service (``started`` with nodes, ``progress`` when they are reported later
or change). Pure: records as Slurm 22.05's ``squeue --json`` prints them (the real-daemon check is
in test_slurm_real.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from actuators.observation import Observation, ObservedJob, job_events
from actuators.slurm.backend import job_nodes
from schemas import JobEventKind

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

TWO_NODES = {  # sbatch -N 2 --gres=gpu:3, as squeue --json reported it on the test daemons
    "job_state": "RUNNING",
    "nodes": "a[1-2]",
    "node_count": 2,
    "tres_per_node": "gres:gpu:3",
    "gres_detail": ["gpu:fake:3(IDX:0-2)", "gpu:fake:3(IDX:0-2)"],
    "job_resources": {
        "nodes": "a[1-2]",
        "allocated_nodes": [{"nodename": "a1", "cpus_used": 0}, {"nodename": "a2", "cpus_used": 0}],
    },
}


def test_slurm_job_nodes_come_from_its_allocation_and_gres_detail() -> None:
    assert job_nodes(TWO_NODES) == {"a1": 3, "a2": 3}
    uneven = {**TWO_NODES, "gres_detail": ["gpu:fake:4(IDX:0-3)", "gpu:fake:1(IDX:5)"]}
    assert job_nodes(uneven) == {"a1": 4, "a2": 1}


def test_without_gres_detail_the_gpus_are_split_over_the_nodes() -> None:
    assert job_nodes({**TWO_NODES, "gres_detail": []}) == {"a1": 3, "a2": 3}
    keyed = {**TWO_NODES, "gres_detail": [], "job_resources": {"allocated_nodes": {"0": {"nodename": "a1"}}}}
    assert job_nodes({**keyed, "node_count": 1, "tres_per_node": "gres:gpu:5"}) == {"a1": 5}


def test_a_job_without_an_allocation_has_no_nodes() -> None:
    assert job_nodes({"job_state": "PENDING", "job_resources": None}) == {}


def _seen(phase: str, nodes: dict[str, int], at: int) -> Observation:
    job = ObservedJob(job_id="j", backend_id="7", phase=phase, pool="pool-a", gpus=6, nodes=nodes)  # type: ignore[arg-type]
    return Observation(cluster="c", backend="slurm", time=T0 + timedelta(seconds=at), jobs={"j": job})


def test_started_carries_the_nodes_and_progress_follows_a_later_report() -> None:
    held = _seen("held", {}, 0)
    started_blind = _seen("running", {}, 10)
    placed = _seen("running", {"a1": 3, "a2": 3}, 20)
    (started,) = job_events(held, started_blind)
    assert started.kind == JobEventKind.STARTED and started.nodes is None
    (progress,) = job_events(started_blind, placed)
    assert progress.kind == JobEventKind.PROGRESS and progress.nodes == {"a1": 3, "a2": 3}
    assert job_events(placed, _seen("running", {"a1": 3, "a2": 3}, 30)) == []  # nothing new
    (direct,) = job_events(held, placed)
    assert direct.kind == JobEventKind.STARTED and direct.nodes == {"a1": 3, "a2": 3}
    (stopped,) = job_events(placed, _seen("held", {}, 40))
    assert stopped.kind == JobEventKind.PREEMPTED and stopped.nodes is None

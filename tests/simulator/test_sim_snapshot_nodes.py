"""The snapshot names the up nodes of each pool and says which running job holds GPUs where."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from sim_helpers import allocation, job, tiny_scenario

from schemas import JobAction, JobDecision, PoolState
from simulator.cluster import Simulator


def test_snapshot_reports_each_running_jobs_nodes() -> None:
    sim = Simulator(
        tiny_scenario(services=[], workload={"explicit": [job("a", 2, gpus=3), job("b", 2, gpus=2)]})
    )
    now = sim.clock.now()
    sim.snapshot(now)
    decisions = [
        JobDecision(job_id=j, action=JobAction.RUN, pool="p", gpus=g, reason="test")
        for j, g in (("a", 3), ("b", 2))
    ]
    sim.apply(allocation(sim, jobs=decisions))
    snap = sim.snapshot(now)
    pool = snap.pools[0]
    assert len(pool.node_names) == len(pool.free_gpus_by_node) == 2
    jobs = {j.spec.job_id: j for j in snap.jobs}
    assert sum(jobs["a"].nodes.values()) == 3 and sum(jobs["b"].nodes.values()) == 2
    assert set(jobs["a"].nodes) != set(jobs["b"].nodes)  # 3 + 2 GPUs do not share a 4-GPU node
    for i, name in enumerate(pool.node_names):
        busy = sum(j.nodes.get(name, 0) for j in snap.jobs)
        assert pool.free_gpus_by_node[i] == 4 - busy


def test_node_names_must_match_the_free_list() -> None:
    with pytest.raises(ValidationError, match="node_names"):
        PoolState(
            name="p",
            gpu_type="A100",
            gpus_total=8,
            gpus_available=8,
            gpus_per_node=4,
            free_gpus_by_node=[4, 4],
            node_names=["n0"],
        )

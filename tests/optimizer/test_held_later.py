"""A running job that cannot be preempted holds its GPUs in the plan's later blocks until its
remaining work ends (optimizer/parameters.py ``held_later``): found on overload-deadlines at seed
23, where the plan saw such jobs' GPUs free from the next block on and read "planned to start" an
hour ahead for two 8-GPU weight-8 jobs at every decision for 8 hours; they never started."""

from __future__ import annotations

from optimizer_cases import NOW, job, pool, state

from optimizer.planner import PlannerPolicy
from schemas import ClusterState, JobAction, PoolState, PoolWindow


def _first_planned_step(cluster: ClusterState, job_id: str) -> int | None:
    decision = PlannerPolicy().decide(cluster, {}, NOW)
    for block in decision.plan.blocks:
        if any(p.job_id == job_id and p.gpus > 0 for p in block.jobs):
            return block.first_step
    return None


def _cluster(preemptible: bool, pools: list[PoolState] | None = None) -> ClusterState:
    """One 8-GPU pool: 'burn-in' runs on all 8 with 3 hours left, 'next' (weight 8) waits."""
    burn_in = job("burn-in", 8, hours=3.0, running_in="a", preemptible=preemptible)
    return state(pools or [pool("a", 8)], [burn_in, job("next", 8, weight=8.0, hours=2.0)], [])


def test_the_plan_starts_nothing_on_a_non_preemptible_jobs_gpus_before_it_ends() -> None:
    """12 steps of 15 minutes: the first block 'next' has GPUs in starts at 3 hours, not at the next."""
    first = _first_planned_step(_cluster(preemptible=False), "next")
    assert first is not None and first >= 12


def test_a_preemptible_job_may_still_give_way_in_the_plan() -> None:
    """The same job, preemptible: the heavier job may take its GPUs sooner (the rule is only for jobs
    the cluster cannot stop)."""
    decision = PlannerPolicy().decide(_cluster(preemptible=True), {}, NOW)
    assert {d.job_id: d.action for d in decision.allocation.jobs}["next"] == JobAction.RUN


def test_maintenance_ahead_leaves_the_later_blocks_to_the_plan() -> None:
    """Where a maintenance window takes GPUs of the pool before the job ends, its later blocks are
    not pinned (the window may take its nodes), so the model stays feasible."""
    window = PoolWindow(start=NOW.replace(hour=13), end=NOW.replace(hour=14), gpus_out=8)
    a = pool("a", 8).model_copy(update={"windows": [window]})
    decision = PlannerPolicy().decide(_cluster(preemptible=False, pools=[a]), {}, NOW)
    assert not decision.plan.solver.fallback

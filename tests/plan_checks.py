"""What every published decision must satisfy, checked on the validated records.

Shared by the optimizer's tests and the scenario tables (tests/scenario_table.py): the plan and the
allocation decode as strict events, no pool is over capacity in any step, gangs are all or nothing,
allowed pools and GPU types hold, non-preemptible running jobs keep running, step 0 and the
allocation agree, and every decision carries a reason.
"""

from __future__ import annotations

import math
from datetime import timedelta

from loop import Decision
from schemas import Allocation, ClusterState, HorizonPlan, JobAction, JobStatus
from schemas.codec import decode, encode


def check_plan(st: ClusterState, decision: Decision, horizon_steps: int, step_s: int) -> None:
    """Every invariant a published decision must satisfy, on the validated records."""
    # what goes on the wire must decode as the strict event it claims to be
    plan = decode(HorizonPlan, encode(decision.plan))
    alloc = decode(Allocation, encode(decision.allocation))
    assert plan == HorizonPlan.model_validate(decision.plan.model_dump())
    assert plan.horizon_steps == horizon_steps and len(plan.steps_expanded()) == horizon_steps
    assert plan.step_s == step_s and alloc.step_s == step_s
    for t, step in enumerate(plan.steps_expanded()):
        assert step.start == st.as_of + timedelta(seconds=step_s * t)
    pools = {p.name: p for p in st.pools}
    jobs = {j.spec.job_id: j for j in st.jobs}
    for step in plan.steps_expanded():
        used: dict[str, float] = {}
        for cap in step.services:
            used[cap.pool] = used.get(cap.pool, 0.0) + cap.gpus
        used = {p: math.ceil(v - 1e-6) for p, v in used.items()}
        seen = set()
        for placement in step.jobs:
            spec = jobs[placement.job_id].spec
            assert placement.job_id not in seen
            seen.add(placement.job_id)
            assert placement.gpus == spec.gpus, "gang size is all or nothing"
            target = pools[placement.pool]
            assert not spec.allowed_pools or placement.pool in spec.allowed_pools
            assert not spec.allowed_gpu_types or target.gpu_type in spec.allowed_gpu_types
            used[placement.pool] = used.get(placement.pool, 0) + placement.gpus
        for name, gpus in used.items():
            limit = pools[name].gpus_total
            for window in pools[name].windows:
                if window.start < step.start + timedelta(seconds=step_s) and window.end > step.start:
                    limit -= window.gpus_out
            limit = min(limit, pools[name].gpus_available)
            assert gpus <= limit + 1e-6, f"pool {name} over capacity at step {step.index}: {gpus} > {limit}"
    decided = {d.job_id: d for d in alloc.jobs}
    for j in st.jobs:
        if j.status == JobStatus.RUNNING and not j.spec.preemptible:
            d = decided[j.spec.job_id]
            assert d.action == JobAction.RUN and d.pool == j.pool, "a non-preemptible job was preempted"
    step0 = {p.job_id: p for p in plan.step(0).jobs}
    for d in alloc.jobs:
        assert d.reason
        if d.action == JobAction.RUN:
            assert step0[d.job_id].pool == d.pool
        else:
            assert d.job_id not in step0
    for service in alloc.services:
        assert service.reason
    assert alloc.fallback == plan.solver.fallback
    if alloc.fallback:
        assert alloc.fallback_reason and plan.solver.fallback_reason


def check_take_back(cluster: ClusterState, decision: Decision) -> None:
    """Services at their burst ceiling plus every job that does not borrow fit in each pool, and a
    job borrows only from a service with a ceiling in its pool."""
    alloc = decision.allocation
    for p in cluster.pools:
        services = sum(s.gpus for s in alloc.services if s.pool == p.name)
        bursts = sum(s.burst_gpus for s in alloc.services if s.pool == p.name)
        running = [j for j in alloc.jobs if j.action == JobAction.RUN and j.pool == p.name]
        assert services + sum(j.gpus for j in running) <= p.gpus_available + 1e-9
        own = sum(j.gpus for j in running if j.borrows_from is None)
        assert services + bursts + own <= p.gpus_available + 1e-9
        ceilings = {s.service for s in alloc.services if s.pool == p.name and s.burst_gpus > 0}
        assert {j.borrows_from for j in running if j.borrows_from is not None} <= ceilings

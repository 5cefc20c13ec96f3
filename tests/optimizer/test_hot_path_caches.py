"""The planner's per-decision shortcuts agree with the slow paths they skip.

The slot table hands out the same read-only class arrays until it lays the slots out again, so
``slots_match`` can answer from object identity; the plan's parts are assembled per job and
service once per decision. These tests check the shortcuts against the full computations on a
rolling cluster (jobs arriving, running, finishing), and that the published records validate.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import numpy as np
from optimizer_cases import NOW, three_pool_cluster

from optimizer.config import PlannerConfig
from optimizer.formulation import build_structure, slots_match
from optimizer.inputs import build_inputs
from optimizer.slots import SlotTable, into_slots
from schemas import Allocation, HorizonPlan, JobAction, JobStatus

CONFIG = PlannerConfig(
    horizon_steps=24, fine_steps=3, mid_block_steps=3, mid_until_step=12, coarse_block_steps=6
)


def _cluster(n_jobs: int, first: int = 0):  # type: ignore[no-untyped-def]
    return three_pool_cluster(n_jobs, first)


def test_slot_arrays_are_shared_read_only_and_renewed_on_a_new_layout() -> None:
    table = SlotTable()
    cluster, forecasts = _cluster(6)
    first = into_slots(build_inputs(cluster, forecasts, NOW, CONFIG), table)
    again = into_slots(build_inputs(cluster, forecasts, NOW, CONFIG), table)
    assert again.job_allowed is first.job_allowed and again.job_team is first.job_team
    assert not first.job_allowed.flags.writeable and not first.job_team.flags.writeable
    # many more jobs of one class than the table has slots for: a new layout, new arrays
    crowded, forecasts = _cluster(60)
    relaid = into_slots(build_inputs(crowded, forecasts, NOW, CONFIG), table)
    assert relaid.job_allowed is not first.job_allowed
    assert relaid.job_allowed.shape[0] > first.job_allowed.shape[0]


def test_slots_match_shortcut_agrees_with_the_full_comparison() -> None:
    table = SlotTable()
    cluster, forecasts = _cluster(9)
    inputs = into_slots(build_inputs(cluster, forecasts, NOW, CONFIG), table)
    structure = build_structure(inputs)
    jobs = list(cluster.jobs)
    for step in range(1, 6):
        later = NOW + timedelta(minutes=15 * step)
        jobs = [*jobs[1:], _cluster(1, first=100 + step)[0].jobs[0]]  # one leaves, one arrives
        moved = cluster.model_copy(update={"as_of": later, "jobs": jobs})
        inputs = into_slots(build_inputs(moved, forecasts, later, CONFIG), table)
        slow = replace(inputs, job_allowed=inputs.job_allowed.copy(), job_team=inputs.job_team.copy())
        assert slow.job_allowed.flags.writeable  # a copy never takes the shortcut
        assert slots_match(structure, inputs) == slots_match(structure, slow)
        if not slots_match(structure, inputs):
            structure = build_structure(inputs)
    # a structure from other slots never matches, shortcut or not
    other_table = SlotTable()
    other = into_slots(build_inputs(_cluster(30)[0], forecasts, NOW, CONFIG), other_table)
    assert not slots_match(structure, other)


def test_published_plan_and_allocation_validate_and_agree_on_step_zero() -> None:
    from optimizer.planner import PlannerPolicy

    cluster, forecasts = _cluster(12)
    planner = PlannerPolicy(config=CONFIG)
    for step in range(3):
        now = NOW + timedelta(minutes=15 * step)
        decision = planner.decide(cluster.model_copy(update={"as_of": now}), forecasts, now)
        plan = HorizonPlan.model_validate(decision.plan.model_dump())
        allocation = Allocation.model_validate(decision.allocation.model_dump())
        assert [s.index for s in plan.steps] == list(range(CONFIG.horizon_steps))
        assert [s.start for s in plan.steps] == [
            now + timedelta(seconds=CONFIG.step_s * t) for t in range(CONFIG.horizon_steps)
        ]
        running = {d.job_id: d.pool for d in allocation.jobs if d.action == JobAction.RUN}
        assert {p.job_id: p.pool for p in plan.steps[0].jobs} == running
        assert all(d.reason for d in allocation.jobs) and all(d.reason for d in allocation.services)
        by_pool = {(c.service, c.pool): c.replicas for c in plan.steps[0].services}
        for d in allocation.services:
            assert by_pool.get((d.service, d.pool), 0) == d.replicas
        jobs = [
            j.model_copy(update={"status": JobStatus.RUNNING, "pool": running[j.spec.job_id]})
            if j.spec.job_id in running
            else j
            for j in cluster.jobs
        ]
        cluster = cluster.model_copy(update={"jobs": jobs})
    assert np.isfinite(sum(decision.plan.objective.values()))

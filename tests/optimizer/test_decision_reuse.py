"""Work the planner keeps between decisions gives what a fresh computation gives.

The slot table skips its layout checks when every job already has a slot; the planner makes the
horizon's blocks once; reason text that depends only on a job's fixed values is kept across
decisions. These tests compare each shortcut with the full computation on a rolling cluster
(jobs arriving and finishing).
"""

from __future__ import annotations

from datetime import timedelta

import numpy as np
from optimizer_cases import NOW, three_pool_cluster

from optimizer.config import PlannerConfig
from optimizer.extract import round_relaxed
from optimizer.fallback import greedy_plan
from optimizer.inputs import build_inputs, make_blocks
from optimizer.plan_build import PartCache, build_allocation
from optimizer.slots import SlotTable, into_slots, slot_classes

CONFIG = PlannerConfig(
    horizon_steps=24, fine_steps=3, mid_block_steps=3, mid_until_step=12, coarse_block_steps=6
)


def _rolling(steps: int):  # type: ignore[no-untyped-def]
    """(now, cluster, forecasts) per step: one job leaves and one arrives every other step."""
    cluster, forecasts = three_pool_cluster(9)
    jobs = list(cluster.jobs)
    for step in range(steps):
        now = NOW + timedelta(minutes=15 * step)
        if step % 2:
            jobs = [*jobs[1:], three_pool_cluster(1, first=100 + step)[0].jobs[0]]
        yield now, cluster.model_copy(update={"as_of": now, "jobs": jobs}), forecasts


def test_slot_classes_are_each_jobs_allowed_row_and_team() -> None:
    cluster, forecasts = three_pool_cluster(9)
    inputs = build_inputs(cluster, forecasts, NOW, CONFIG)
    expected = [(inputs.job_allowed[j].tobytes(), int(inputs.job_team[j])) for j in range(inputs.n_jobs)]
    assert slot_classes(inputs) == expected


def test_kept_slots_stay_and_new_jobs_take_free_slots_of_their_class() -> None:
    table = SlotTable()
    seen: dict[str, int] = {}
    for now, cluster, forecasts in _rolling(8):
        inputs = build_inputs(cluster, forecasts, now, CONFIG)
        slotted = into_slots(inputs, table)
        slot_of = {job_id: s for s, job_id in enumerate(slotted.job_ids) if job_id}
        assert sorted(slot_of) == sorted(inputs.job_ids)  # every job has one slot
        for job_id, slot in slot_of.items():
            assert seen.get(job_id, slot) == slot  # a job keeps its slot for its life
            j = inputs.job_ids.index(job_id)
            assert np.array_equal(slotted.job_allowed[slot], inputs.job_allowed[j])
        seen.update(slot_of)


def test_planner_blocks_equal_fresh_blocks_and_are_read_only() -> None:
    cluster, forecasts = three_pool_cluster(3)
    blocks = make_blocks(CONFIG, CONFIG.horizon_steps, CONFIG.step_s)
    kept = build_inputs(cluster, forecasts, NOW, CONFIG, blocks=blocks).blocks
    fresh = build_inputs(cluster, forecasts, NOW, CONFIG).blocks
    assert kept is blocks
    assert np.array_equal(kept.first_step, fresh.first_step)
    assert np.array_equal(kept.dur_s, fresh.dur_s)
    assert not kept.dur_s.flags.writeable


def test_kept_reason_text_equals_fresh_reason_text() -> None:
    cache = PartCache()
    for now, cluster, forecasts in _rolling(6):
        inputs = into_slots(build_inputs(cluster, forecasts, now, CONFIG), SlotTable())
        rounded = greedy_plan(inputs, CONFIG, None)
        kept = build_allocation(inputs, rounded, plan_id="p", policy="t", fallback_reason=None, cache=cache)
        fresh = build_allocation(inputs, rounded, plan_id="p", policy="t", fallback_reason=None)
        assert kept.model_dump() == fresh.model_dump()
        assert any(d.action == "run" for d in kept.jobs)
    assert cache.texts  # the run reasons' heads were kept


def test_round_relaxed_is_unchanged_by_kept_blocks() -> None:
    cluster, forecasts = three_pool_cluster(6)
    blocks = make_blocks(CONFIG, CONFIG.horizon_steps, CONFIG.step_s)
    plans = []
    for kept in (blocks, None):
        inputs = build_inputs(cluster, forecasts, NOW, CONFIG, blocks=kept)
        greedy = greedy_plan(inputs, CONFIG, None)
        plans.append(
            round_relaxed(
                inputs,
                CONFIG,
                greedy.svc_replicas.astype(float),
                greedy.svc_gpus,
                greedy.job_share0,
                greedy.job_share,
            )
        )
    assert np.array_equal(plans[0].job_pool, plans[1].job_pool)
    assert np.array_equal(plans[0].svc_replicas, plans[1].svc_replicas)

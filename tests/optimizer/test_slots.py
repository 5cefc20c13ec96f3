"""Job slots (optimizer/slots.py): every job keeps one slot of its class for its life, and a new
job takes the lowest free slot of its class."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

import numpy as np
from optimizer_cases import NOW, three_pool_cluster

from optimizer.config import PlannerConfig
from optimizer.formulation import quota_rows_of_jobs, quota_team_names
from optimizer.inputs import build_inputs
from optimizer.model_update import HorizonModel
from optimizer.nodes import NodeHolds
from optimizer.slots import SlotTable, into_slots, slot_classes
from schemas import ClusterState, DemandForecast

CONFIG = PlannerConfig(
    horizon_steps=24, fine_steps=3, mid_block_steps=3, mid_until_step=12, coarse_block_steps=6
)


def _rolling(steps: int) -> Iterator[tuple[datetime, ClusterState, dict[str, DemandForecast]]]:
    """(now, cluster, forecasts) per step: one job leaves and one arrives every other step."""
    cluster, forecasts = three_pool_cluster(9)
    jobs = list(cluster.jobs)
    for step in range(steps):
        now = NOW + timedelta(minutes=15 * step)
        if step % 2:
            jobs = [*jobs[1:], three_pool_cluster(1, first=100 + step)[0].jobs[0]]
        yield now, cluster.model_copy(update={"as_of": now, "jobs": jobs}), forecasts


def test_slot_classes_are_each_jobs_allowed_row_and_quota_row() -> None:
    cluster, forecasts = three_pool_cluster(9)  # team x has a quota, team y none
    inputs = build_inputs(cluster, forecasts, NOW, CONFIG)
    quota_row = {"x": 0, "y": -1}
    expected = [
        (inputs.job_allowed[j].tobytes(), quota_row[inputs.team_names[inputs.job_team[j]]])
        for j in range(inputs.n_jobs)
    ]
    assert slot_classes(inputs) == expected


def test_a_job_of_a_new_team_without_a_quota_takes_a_free_slot_without_a_new_layout() -> None:
    """Teams without a quota share a class (a team enters the matrix only by its quota row), so a
    team that was not there before changes no slot and the model keeps its structure."""
    cluster, forecasts = three_pool_cluster(6)
    model = HorizonModel()
    holds: NodeHolds = {}
    first = model.update(build_inputs(cluster, forecasts, NOW, CONFIG), CONFIG, holds)
    model.solve(first, time_limit_s=10.0)
    newcomer = three_pool_cluster(1, first=9)[0].jobs[0]  # j9: gang 1, any pool, like j0, j3
    newcomer = newcomer.model_copy(update={"spec": newcomer.spec.model_copy(update={"team": "z"})})
    later = cluster.model_copy(update={"jobs": [*cluster.jobs, newcomer]})
    again = model.update(build_inputs(later, forecasts, NOW, CONFIG), CONFIG, holds)
    assert again.structure is first.structure  # updated in place, not rebuilt
    slot = again.inputs.job_ids.index("j9")
    assert again.inputs.team_names[again.inputs.job_team[slot]] == "z"
    for job_id in first.inputs.job_ids:
        if job_id:
            assert again.inputs.job_ids.index(job_id) == first.inputs.job_ids.index(job_id)


def test_every_slot_carries_a_team_of_its_class_quota_row() -> None:
    """Empty slots included: the team an empty slot carries keeps the matrix of its class."""
    cluster, forecasts = three_pool_cluster(7)
    table = SlotTable()
    slotted = into_slots(build_inputs(cluster, forecasts, NOW, CONFIG), table)
    assert table.capacity > slotted.job_active.sum()  # some slots are empty
    rows = quota_rows_of_jobs(slotted, quota_team_names(slotted))
    assert np.array_equal(rows, table.quota_row)
    assert set(rows.tolist()) == {-1, 0}


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


def test_new_jobs_take_the_lowest_free_slots_of_their_class() -> None:
    table = SlotTable()
    cluster, forecasts = three_pool_cluster(6)
    first = into_slots(build_inputs(cluster, forecasts, NOW, CONFIG), table)
    slot_of = {job_id: slot for slot, job_id in enumerate(first.job_ids) if job_id}
    # j0 and j3 leave (one class each), j6 (j0's class) and j7 (j1's class) arrive
    cluster, forecasts = three_pool_cluster(8)
    cluster = cluster.model_copy(
        update={"jobs": [j for j in cluster.jobs if j.spec.job_id not in ("j0", "j3")]}
    )
    again = into_slots(build_inputs(cluster, forecasts, NOW, CONFIG), table)
    now_at = {job_id: slot for slot, job_id in enumerate(again.job_ids) if job_id}
    for kept in ("j1", "j2", "j4", "j5"):
        assert now_at[kept] == slot_of[kept]
    members = table.members
    for new_job, like in (("j6", "j0"), ("j7", "j1")):
        cls = next(c for c, slots in members.items() if slot_of[like] in slots)
        taken = {now_at[j] for j in now_at if j != new_job}
        assert now_at[new_job] == min(s for s in members[cls] if s not in taken)

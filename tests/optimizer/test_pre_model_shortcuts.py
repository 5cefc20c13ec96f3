"""The shortcuts taken before the model update agree, bit for bit, with the numpy they replace.

The level correction shifts a forecast's first steps with plain floats, block values multiply
only the rows of jobs with a deadline, and the slot table looks for free slots only in the
classes that take a new job.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from optimizer_cases import NOW, three_pool_cluster

from optimizer.calibration import _shifted
from optimizer.config import PlannerConfig
from optimizer.inputs import build_inputs
from optimizer.parameters import block_values
from optimizer.slots import SlotTable, into_slots

CONFIG = PlannerConfig(
    horizon_steps=24, fine_steps=3, mid_block_steps=3, mid_until_step=12, coarse_block_steps=6
)


def _bits(values: list[float] | np.ndarray) -> bytes:
    return np.asarray(values, dtype=float).tobytes()


def test_shifted_floors_like_numpy_maximum_signed_zeros_included() -> None:
    values = [0.0, -0.0, 1.5, 2.0, 0.25, 3.0, 7.0]
    shift = [-0.0, -0.0, -1.5, -2.5, 0.125, 1e-17, -7.0, 4.0]  # one longer: the values set the length
    expected = np.maximum(np.asarray(values) + np.asarray(shift[: len(values)]), 0.0)
    got = _shifted(values, shift)
    assert _bits(got) == expected.tobytes()  # -0.0 + -0.0 floors to +0.0, as np.maximum does
    assert _bits(_shifted(values, shift[:3])) == expected[:3].tobytes()  # the shift sets the length


def _plain_block_values(inputs, config):  # type: ignore[no-untyped-def]
    """block_values as it was first written: every row through the deadline bonus."""
    blocks = inputs.blocks
    mid = blocks.first_step + blocks.n_steps / 2.0
    earliness = 1.0 + config.earliness * (1.0 - mid / inputs.horizon_steps)
    before = np.clip(
        (inputs.job_deadline_step[:, None] - blocks.first_step[None, :]) / blocks.n_steps[None, :], 0.0, 1.0
    )
    has_deadline = inputs.job_deadline_step[:, None] <= inputs.horizon_steps
    bonus = np.where(has_deadline, config.deadline_bonus * before, 0.0)
    return inputs.job_weight[:, None] * earliness[None, :] * (1.0 + bonus)


def test_block_values_match_the_plain_formula_with_and_without_deadlines() -> None:
    cluster, forecasts = three_pool_cluster(9)
    inputs = build_inputs(cluster, forecasts, NOW, CONFIG)
    none = inputs.horizon_steps + 1
    for deadlines in ([none] * 9, [0, 1, 2, 5, 11, 13, 23, 24, none]):
        case = replace(inputs, job_deadline_step=np.asarray(deadlines, dtype=np.int64))
        expected = _plain_block_values(case, CONFIG)
        assert block_values(case, CONFIG).tobytes() == expected.tobytes()


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

"""Coefficients that move with the job in a slot, updated in place in the horizon model's matrix.

Place in the loop: between steps the persistent model (optimizer/model_update.py) keeps the matrix
optimizer/formulation.py built while the job slots still match it (``slots_match``); a job taking
over a slot changes only its gang's coefficient (the preemption bound) and its deadline's (which
blocks lie before it), and ``update_slots`` writes those into the matrix and returns them for the
solver (optimizer/solve_highs.py). Pure but for the structure it updates.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from optimizer.deadlines import deadline_coefficients
from optimizer.formulation import ModelStructure, hall_members, quota_rows_of_jobs
from optimizer.inputs import PlanInputs


def slots_match(structure: ModelStructure, inputs: PlanInputs) -> bool:
    """Whether the matrix encodes ``inputs``' job slots (allowed pools, team), gangs aside.

    Job slots are grouped by class (optimizer/slots.py), so a job taking over a slot changes no
    coefficient but its gang's and its deadline's (see update_slots); if more would change, the
    caller rebuilds.
    """
    members = hall_members(inputs.job_allowed, structure.hall_sets)
    quota = quota_rows_of_jobs(inputs, structure.quota_teams)
    return bool(
        structure.y0_pairs.shape[0] == int(inputs.job_allowed.sum())
        and np.array_equal(members, structure.slot_hall)
        and np.array_equal(quota, structure.slot_quota)
    )


class EntryChanges(NamedTuple):
    """Matrix entries changed in place: their rows, columns, positions in ``data`` and values."""

    rows: np.ndarray
    cols: np.ndarray
    at: np.ndarray
    values: np.ndarray


def update_slots(structure: ModelStructure, inputs: PlanInputs) -> EntryChanges:
    """The matrix entries that follow the jobs in the slots (gangs, deadlines), written into the
    structure's matrix and returned."""
    gangs, deadlines = update_gangs(structure, inputs), update_deadlines(structure, inputs)
    if not deadlines.at.size:
        return gangs
    return EntryChanges(*(np.concatenate(pair) for pair in zip(gangs, deadlines, strict=True)))


def update_deadlines(structure: ModelStructure, inputs: PlanInputs) -> EntryChanges:
    """The deadline-row entries of real jobs whose blocks before their deadline moved (each step
    the deadline comes one step nearer), written into the structure's matrix and returned."""
    wanted = deadline_coefficients(inputs, structure.deadline_margin)[:, 1:]
    differs = np.abs(wanted - structure.slot_deadline) > 1e-12
    if inputs.job_active is not None:
        differs &= inputs.job_active[:, None]
    jobs, blocks = differs.nonzero()
    values = wanted[jobs, blocks]
    structure.slot_deadline[jobs, blocks] = values
    at = structure.deadline_at[jobs, blocks]
    structure.matrix.data[at] = values
    rows = structure.rows["deadline"][jobs]
    return EntryChanges(rows, structure.cols["yb"][jobs, blocks], at, values)


def update_gangs(structure: ModelStructure, inputs: PlanInputs) -> EntryChanges:
    """The matrix entries of jobs that took over a slot with another gang size (the 1/gang of the
    preemption bound), written into the structure's matrix and returned."""
    differs = inputs.job_gang != structure.slot_gang
    if inputs.job_active is not None:
        differs &= inputs.job_active
    changed = differs.nonzero()[0]
    if not changed.size:  # the usual case: every job kept its slot's gang, nothing to look up
        none = np.zeros(0, dtype=np.int64)
        return EntryChanges(none, structure.cols["pre"][changed], none, np.zeros(0))
    structure.slot_gang[changed] = inputs.job_gang[changed]
    rows = np.full(changed.size, structure.rows["preempt_bound"][0], dtype=np.int64)
    cols = structure.cols["pre"][changed]
    values = 1.0 / np.maximum(inputs.job_gang[changed], 1.0)
    at = structure.matrix.entry_at(rows, cols)
    structure.matrix.data[at] = values
    return EntryChanges(rows, cols, at, values)

"""Deadlines in the plan (used by the model's deadline rows, optimizer/formulation.py, by their
price, optimizer/parameters.py, by step 0's stop rule, optimizer/stop_pays.py, and by the reasons):
which jobs can still meet their deadline, the step each is planned to finish by, and the GPU-hours
one of its GPUs does before it in each block. Pure functions of PlanInputs.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only: optimizer/quota.py imports stop_pays, which imports this
    from optimizer.inputs import PlanInputs


def steps_of_work(inputs: PlanInputs) -> np.ndarray:
    """[J] steps each job's gang needs for its remaining work (whole steps: see PlanInputs)."""
    per_step = np.maximum(inputs.job_gang, 1.0) * inputs.step_s
    steps: np.ndarray = np.ceil(inputs.job_remaining_s / per_step - 1e-9)
    return steps


def deadline_in_reach(inputs: PlanInputs) -> np.ndarray:
    """[J] the job has work left, a pool, and a deadline in the horizon that its gang, running
    from now on, can still meet."""
    deadline = inputs.job_deadline_step
    reach = (deadline <= inputs.horizon_steps) & (steps_of_work(inputs) <= deadline)
    reach &= (inputs.job_remaining_s > 0) & inputs.job_allowed.any(axis=1)
    return np.asarray(reach, dtype=bool)


def margin_steps(margin_s: float, step_s: int) -> int:
    """PlannerConfig.deadline_margin_s in whole steps."""
    return math.ceil(margin_s / step_s - 1e-9)


def planned_deadline_step(inputs: PlanInputs, margin: int) -> np.ndarray:
    """[J] the step a deadline row plans a job to finish by: ``margin`` steps before its deadline
    where the job can still finish by then, else as soon as it can (its deadline if out of reach)."""
    deadline = inputs.job_deadline_step
    earliest = np.maximum(deadline - margin, steps_of_work(inputs))
    planned: np.ndarray = np.where(deadline_in_reach(inputs), earliest, deadline)
    return planned


def deadline_coefficients(inputs: PlanInputs, margin: int) -> np.ndarray:
    """[J, B] GPU-hours one GPU of each job does before its planned deadline in each block: the
    block's hours, by the share of its steps before it (all of them for a job without one)."""
    blocks = inputs.blocks
    planned = planned_deadline_step(inputs, margin)
    before = (planned[:, None] - blocks.first_step[None, :]) / blocks.n_steps[None, :]
    hours: np.ndarray = before.clip(0.0, 1.0) * (blocks.dur_s / 3600.0)[None, :]
    return hours

"""The per-job numbers step 0's placement reads (optimizer/step0.py), gathered once per decision.

Step 0 is rounded after the horizon model is solved: its loops over jobs read gangs, teams,
quotas and running pools as Python lists (indexing a list is far cheaper than indexing an array
item by item); clearing nodes for a gang weighs what stopping each job would lose (worked out
only where a gang needs nodes cleared). Pure.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from optimizer.inputs import PlanInputs


class StopCosts(NamedTuple):
    """What clearing nodes weighs (step0's node level): per job, the work a stop loses (GPU-s,
    with the preemption penalty); which running jobs may be stopped; the horizon's length; and
    which jobs have no deadline to miss (only those are stopped for lower-weight gangs)."""

    lost: list[float]
    stoppable: np.ndarray
    horizon_s: float
    no_deadline: list[bool]

    @classmethod
    def of(cls, inputs: PlanInputs, stoppable: np.ndarray, penalty_gpu_s: float) -> StopCosts:
        return cls(
            (inputs.job_lost_gpu_s + penalty_gpu_s * inputs.job_gang).tolist(),
            stoppable,
            float(inputs.blocks.dur_s.sum()),
            (inputs.job_deadline_step > inputs.horizon_steps).tolist(),
        )


class JobLists(NamedTuple):
    """The per-job and per-team numbers step 0's loops read: as Python lists those read for most
    jobs (indexing a list is far cheaper than indexing an array item by item), as arrays those
    read for a few starts only (a list of every job would cost more than it saves). They depend
    only on the inputs, so round_step0 makes them once however often it places step 0."""

    gangs: list[float]
    team: list[int]
    quota: list[float]
    running_pool: list[int]
    wall_s: np.ndarray  # [J] wall seconds to finish: remaining GPU-seconds over the gang
    run_steps: np.ndarray  # [J] whole steps to finish
    start_s: np.ndarray  # [J] wall seconds a start costs: the run plus its restart

    @classmethod
    def of(cls, inputs: PlanInputs) -> JobLists:
        wall_s = inputs.job_remaining_s / np.maximum(inputs.job_gang, 1.0)
        return cls(
            inputs.job_gang.tolist(),
            inputs.job_team.tolist(),
            inputs.team_quota.tolist(),
            inputs.job_running_pool.tolist(),
            wall_s,
            np.ceil(wall_s / inputs.step_s),
            wall_s + inputs.job_restart_s,
        )

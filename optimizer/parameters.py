"""The horizon model's parameters: costs, column bounds and row bounds for one decision.

Everything that changes from step to step (demand at the SLO quantile, pool capacity, remaining
work, running placements, weights, deadlines) lands here, on top of a fixed ModelStructure.
The objective is minimised: value of priority-weighted work (earlier is worth more, work before a
deadline more still) enters negatively; SLO shortfall, missing minimum replicas, preemption
(work since the last checkpoint plus restart cost), interference (capacity on shared GPUs),
scale-up churn and idle service GPUs enter positively. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from optimizer.config import PlannerConfig
from optimizer.formulation import INF, ModelStructure
from optimizer.inputs import PlanInputs


@dataclass(frozen=True)
class Parameters:
    cost: np.ndarray
    col_lower: np.ndarray
    col_upper: np.ndarray
    row_lower: np.ndarray
    row_upper: np.ndarray


def block_values(inputs: PlanInputs, config: PlannerConfig) -> np.ndarray:
    """[J, B] value of one GPU-hour of each job in each block: priority, earliness, deadline."""
    blocks = inputs.blocks
    mid = blocks.first_step + blocks.n_steps / 2.0
    earliness = 1.0 + config.earliness * (1.0 - mid / inputs.horizon_steps)
    before = np.clip(
        (inputs.job_deadline_step[:, None] - blocks.first_step[None, :]) / blocks.n_steps[None, :], 0.0, 1.0
    )
    has_deadline = inputs.job_deadline_step[:, None] <= inputs.horizon_steps
    bonus = np.where(has_deadline, config.deadline_bonus * before, 0.0)
    return inputs.job_weight[:, None] * earliness[None, :] * (1.0 + bonus)


def shortfall_cost_per_gpu_h(inputs: PlanInputs, config: PlannerConfig) -> float:
    """Above the value of any job's GPU-hour, so capacity for the SLO always comes first."""
    top_value = inputs.max_weight * (1.0 + config.earliness) * (1.0 + config.deadline_bonus)
    return config.shortfall_penalty * top_value


def fill_parameters(structure: ModelStructure, inputs: PlanInputs, config: PlannerConfig) -> Parameters:
    cols, rows = structure.cols, structure.rows
    dur_s = inputs.blocks.dur_s
    dur_h = dur_s / 3600.0
    avail = inputs.avail_blocks()
    demand = inputs.demand_blocks()
    values = block_values(inputs, config)
    w_max = inputs.max_weight
    short_cost = shortfall_cost_per_gpu_h(inputs, config)

    cost = np.zeros(structure.n_cols)
    lower = np.zeros(structure.n_cols)
    upper = np.full(structure.n_cols, INF)
    j0, p0 = structure.y0_pairs[:, 0], structure.y0_pairs[:, 1]
    gang = inputs.job_gang
    run_pool = inputs.job_running_pool
    running = run_pool >= 0
    has_work = inputs.job_remaining_s > 0

    y0, yb, pre = cols["y0"], cols["yb"], cols["pre"]
    cost[y0] = -values[j0, 0] * dur_h[0]
    movable = ((run_pool[j0] < 0) | (run_pool[j0] == p0)) & has_work[j0] & inputs.job_allowed[j0, p0]
    upper[y0] = np.where(movable, gang[j0], 0.0)
    pinned = running[j0] & ~inputs.job_preemptible[j0] & (run_pool[j0] == p0) & has_work[j0]
    lower[y0] = np.where(pinned, gang[j0], 0.0)
    cost[yb] = -values[:, 1:] * dur_h[None, 1:]
    upper[yb] = np.where(inputs.job_allowed.any(axis=1) & has_work, gang, 0.0)[:, None]
    # pre[j] counts preempted GPUs of the gang: lost work plus the disruption, per GPU
    per_gpu = np.maximum(gang, 1.0)
    cost[pre] = inputs.job_weight * (
        inputs.job_lost_gpu_s / 3600.0 / per_gpu + config.preemption_penalty_gpu_h
    )
    upper[pre] = np.where(running & inputs.job_preemptible, gang, 0.0)

    s_of = structure.sp_pairs[:, 0]
    gpr = inputs.svc_gpr[s_of]
    r_col, g_col = cols["R"], cols["G"]
    upper[r_col] = inputs.svc_max[s_of][:, None]
    interference = config.interference_cost * w_max * dur_h[None, :]
    gpu_cost = config.service_gpu_cost * w_max * dur_h[None, :] - interference
    shared = structure.sp_shared
    # where a pair cannot time-slice, G = gpr * R has no column: its cost moves onto R
    cost[r_col] = interference * gpr[:, None] + np.where(shared, 0.0, gpr)[:, None] * gpu_cost
    cost[g_col] = gpu_cost
    cost[cols["up"]] = config.churn_penalty_gpu * w_max
    cost[cols["short"]] = short_cost * dur_h[None, :]
    cost[cols["minshort"]] = (
        config.min_replica_penalty
        / config.shortfall_penalty
        * short_cost
        * (dur_h[None, :] * inputs.svc_gpr[:, None])
        if config.shortfall_penalty > 0
        else 0.0
    )

    row_lower = np.full(structure.n_rows, -INF)
    row_upper = np.full(structure.n_rows, INF)
    row_upper[rows["gang0"]] = gang
    row_upper[rows["work"]] = inputs.job_remaining_s
    row_lower[rows["preempt_link"]] = np.where(running, gang, 0.0)
    if inputs.blocks.count > 1:
        block_end_s = np.cumsum(dur_s)[1:]
        fills = inputs.job_remaining_s[:, None] >= gang[:, None] * block_end_s[None, :] - 1e-6
        movable_now = running & inputs.job_preemptible
        n_keep = rows["keep_running"].shape[1]
        keep = np.where(movable_now[:, None] & fills[:, :n_keep], gang[:, None], 0.0)
        row_lower[rows["keep_running"]] = keep
    row_upper[rows["preempt_bound"]] = float(config.max_preemptions_per_step)
    row_upper[rows["cap0"]] = avail[:, 0]
    if inputs.blocks.count > 1:
        row_upper[rows["hall"]] = structure.hall_sets.astype(float) @ avail[:, 1:]
    if structure.quota_teams:
        # Never below what non-preemptible running jobs already hold (they cannot be stopped).
        stuck = running & ~inputs.job_preemptible
        pinned_gpus = np.bincount(
            inputs.job_team[stuck], weights=gang[stuck], minlength=inputs.team_quota.size
        )
        by_name = dict(zip(inputs.team_names, np.maximum(inputs.team_quota, pinned_gpus), strict=True))
        quota = np.asarray([by_name.get(t, np.inf) for t in structure.quota_teams])
        row_upper[rows["quota"]] = quota[:, None]
    row_lower[rows["cover"]] = demand
    row_lower[rows["pack"]] = 0.0
    row_upper[rows["dedicated"]] = 0.0
    row_lower[rows["min_replicas"]] = inputs.svc_min[:, None]
    row_upper[rows["max_replicas"]] = inputs.svc_max[:, None]
    row_lower[rows["scale_up"]] = 0.0
    p_of = structure.sp_pairs[:, 1]
    row_lower[rows["scale_up"][:, 0]] = -inputs.svc_replicas_now[s_of, p_of] * gpr
    return Parameters(cost, lower, upper, row_lower, row_upper)

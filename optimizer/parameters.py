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
    values: np.ndarray = inputs.job_weight[:, None] * earliness[None, :]
    # Only jobs with a deadline get a bonus; the others' factor (1 + 0) leaves their values as
    # they are, so only the deadline rows are multiplied (the same arithmetic, on fewer rows).
    deadline_step = inputs.job_deadline_step
    with_deadline = (deadline_step <= inputs.horizon_steps).nonzero()[0]
    if with_deadline.size:
        before = (
            (deadline_step[with_deadline, None] - blocks.first_step[None, :]) / blocks.n_steps[None, :]
        ).clip(0.0, 1.0)
        values[with_deadline] *= 1.0 + config.deadline_bonus * before
    return values


def shortfall_cost_per_gpu_h(inputs: PlanInputs, config: PlannerConfig) -> float:
    """Above the value of any job's GPU-hour, so capacity for the SLO always comes first."""
    top_value = inputs.max_weight * (1.0 + config.earliness) * (1.0 + config.deadline_bonus)
    return config.shortfall_penalty * top_value


def _filled(size: int, value: float) -> np.ndarray:
    """A new float array of ``size`` copies of ``value`` (np.full, without its Python wrapper)."""
    filled = np.empty(size)
    filled.fill(value)
    return filled


def service_gpu_cost(inputs: PlanInputs, config: PlannerConfig, pairs: np.ndarray) -> np.ndarray:
    """[pairs] cost of a service GPU-hour in each (service, pool) pair, per unit of the highest
    job weight: more where the service has no replicas now (PlannerConfig.stay_preference)."""
    away = inputs.svc_replicas_now[pairs[:, 0], pairs[:, 1]] == 0
    return config.service_gpu_cost * np.where(away, 1.0 + config.stay_preference, 1.0)


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
    upper = _filled(structure.n_cols, INF)
    j0, p0 = structure.y0_pairs[:, 0], structure.y0_pairs[:, 1]
    gang = inputs.job_gang
    run_pool = inputs.job_running_pool
    running = run_pool >= 0
    has_work = inputs.job_remaining_s > 0

    y0, yb, pre = cols["y0"], cols["yb"], cols["pre"]
    # a job's value over a block, negated (the objective is minimised): values x -hours is
    # -(values x hours) exactly, as a product's sign does not change its rounding
    gain = values * -dur_h[None, :]
    cost[y0] = gain[:, 0][j0]
    # per y0 column (each a job's pool): looked up once, used by both bounds
    pool_of_run, work_of, gang_of = run_pool[j0], has_work[j0], gang[j0]
    in_pool = pool_of_run == p0
    movable = ((pool_of_run < 0) | in_pool) & work_of & inputs.job_allowed[j0, p0]
    upper[y0] = np.where(movable, gang_of, 0.0)
    pinned = in_pool & ~inputs.job_preemptible[j0] & work_of  # in_pool: the job runs there
    lower[y0] = np.where(pinned, gang_of, 0.0)
    cost[yb] = gain[:, 1:]
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
    gpu_cost = service_gpu_cost(inputs, config, structure.sp_pairs)[:, None] * (w_max * dur_h)[None, :]
    gpu_cost -= interference
    shared = structure.sp_shared
    # where a pair cannot time-slice, G = gpr * R has no column: its cost moves onto R
    cost[r_col] = interference * gpr[:, None] + np.where(shared, 0.0, gpr)[:, None] * gpu_cost
    cost[g_col] = gpu_cost[shared]
    cost[cols["up0"]] = config.churn_penalty_gpu * w_max
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

    row_lower = _filled(structure.n_rows, -INF)
    row_upper = _filled(structure.n_rows, INF)
    row_upper[rows["gang0"]] = gang
    row_upper[rows["work"]] = inputs.job_remaining_s
    row_lower[rows["preempt_link"]] = np.where(running, gang, 0.0)
    if inputs.blocks.count > 1:
        n_keep = rows["keep_running"].shape[1]  # the first blocks after step 0 have the rows
        block_end_s = dur_s[: 1 + n_keep].cumsum()[1:]  # the running sum: a prefix of np.cumsum(dur_s)
        fills = inputs.job_remaining_s[:, None] >= gang[:, None] * block_end_s[None, :] - 1e-6
        movable_now = running & inputs.job_preemptible
        keep = np.where(movable_now[:, None] & fills, gang[:, None], 0.0)
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
        floor = np.maximum(inputs.team_quota, pinned_gpus).tolist()
        by_name = dict(zip(inputs.team_names, floor, strict=True))
        quota = np.asarray([by_name.get(t, INF) for t in structure.quota_teams])
        row_upper[rows["quota"]] = quota[:, None]
    row_lower[rows["cover"]] = demand
    row_lower[rows["pack"]] = 0.0
    row_upper[rows["dedicated"]] = 0.0
    row_lower[rows["min_replicas"]] = inputs.svc_min[:, None]
    row_upper[rows["max_replicas"]] = inputs.svc_max[:, None]
    row_lower[rows["scale_up"]] = 0.0
    p_of = structure.sp_pairs[:, 1]
    row_lower[rows["scale_up0"]] = -inputs.svc_replicas_now[s_of, p_of] * gpr
    return Parameters(cost, lower, upper, row_lower, row_upper)

"""The horizon model's parameters: costs, column bounds and row bounds for one decision.

Part of pipeline stage 3 (update the model, optimizer/model_update.py).

Everything that changes from step to step (demand at the SLO quantile, pool capacity, remaining
work, running placements, weights, deadlines) lands here, on top of a fixed ModelStructure.
The objective is minimised: value of priority-weighted work (earlier is worth more, and a job
closer to done or waiting longer a little more: ``finish_share``) enters negatively; SLO
shortfall, missing minimum replicas, preemption (work since the last checkpoint plus restart
cost), interference (capacity on shared GPUs), scale-up churn, idle service GPUs and work left past
a deadline enter positively.

Deadlines (``deadline_requirement``): a job whose gang can still finish its remaining work by its
deadline, running from now on, asks its deadline row for all of it, and each GPU-hour left past
the deadline costs more than any other use of a GPU-hour is worth (PlannerConfig.deadline_penalty),
so the deadline is met wherever capacity allows and priced where it does not. A deadline that is
already out of reach asks for nothing: as a production scheduler would, the plan does not give
GPUs to a job for a deadline it will miss anyway (it keeps its weight, like any other job). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from optimizer.config import PlannerConfig
from optimizer.deadlines import deadline_in_reach, steps_of_work
from optimizer.formulation import INF, ModelStructure, move_blocks
from optimizer.inputs import PlanInputs


@dataclass(frozen=True)
class Parameters:
    cost: np.ndarray
    col_lower: np.ndarray
    col_upper: np.ndarray
    row_lower: np.ndarray
    row_upper: np.ndarray


def block_values(inputs: PlanInputs, config: PlannerConfig) -> np.ndarray:
    """[J, B] value of one GPU-hour of each job in each block: its priority, more the earlier, and
    a little more the closer it is to done (deadlines are rows of their own: formulation.py's
    ``deadline``, priced by ``late``)."""
    blocks = inputs.blocks
    mid = blocks.first_step + blocks.n_steps / 2.0
    earliness = 1.0 + config.earliness * (1.0 - mid / inputs.horizon_steps)
    weight = inputs.job_weight * (1.0 + finish_share(inputs, config))
    values: np.ndarray = weight[:, None] * earliness[None, :]
    return values


def finish_share(inputs: PlanInputs, config: PlannerConfig) -> np.ndarray:
    """[J] how much more a GPU-hour of each job is worth, as a share of its weight
    (PlannerConfig.finish_bonus), by its response ratio: (waited + finish_hours) over (waited +
    finish_hours + hours of work left). Among equal weights the sooner done goes first, and a job
    that has waited goes before newer ones that would finish sooner, more the longer it waited
    (highest response ratio next), so a stream of short jobs cannot hold a long one back forever."""
    hours_left = steps_of_work(inputs) * inputs.step_s / 3600.0
    head = config.finish_hours + inputs.job_waited_s / 3600.0
    share: np.ndarray = config.finish_bonus * head / (head + hours_left)
    return share


def top_job_value(inputs: PlanInputs, config: PlannerConfig) -> float:
    """The unit of the SLO's and deadlines' prices: the most one GPU-hour of any job is worth
    before the little its nearness to done adds (block_values: under PlannerConfig.finish_bonus)."""
    return inputs.max_weight * (1.0 + config.earliness)


SLO_PRICE_UNIT = 1.25
"""The unit of PlannerConfig.shortfall_penalty and min_replica_penalty is this times the most any
job's GPU-hour is worth: the most it was worth when a deadline was an objective bonus of 25%, so
the SLO's price did not move when deadlines became rows."""


def shortfall_cost_per_gpu_h(inputs: PlanInputs, config: PlannerConfig) -> float:
    """Above the value of any job's GPU-hour, so capacity for the SLO always comes first."""
    return config.shortfall_penalty * (top_job_value(inputs, config) * SLO_PRICE_UNIT)


def deadline_requirement(inputs: PlanInputs) -> np.ndarray:
    """[J] GPU-hours each job's deadline row asks for before its deadline: all its remaining work
    where its deadline is in reach (deadlines.deadline_in_reach), 0 for every other job."""
    need: np.ndarray = np.where(deadline_in_reach(inputs), inputs.job_remaining_s / 3600.0, 0.0)
    return need


def service_gpu_cost(inputs: PlanInputs, config: PlannerConfig, pairs: np.ndarray) -> np.ndarray:
    """[pairs] cost of a service GPU-hour in each (service, pool) pair, per unit of the highest
    job weight: more where the service has no replicas now (PlannerConfig.stay_preference)."""
    away = inputs.svc_replicas_now[pairs[:, 0], pairs[:, 1]] == 0
    return config.service_gpu_cost * np.where(away, 1.0 + config.stay_preference, 1.0)


def kept_demand(inputs: PlanInputs) -> np.ndarray:
    """[S, move blocks] demand the replicas kept into step 0 and block 1 carry while added ones
    start up: the demand now, and in block 1 no more than that block's."""
    n_move = move_blocks(inputs)
    need = np.repeat(inputs.svc_demand_now[:, None], n_move, axis=1)
    need[:, 1:] = np.minimum(need[:, 1:], inputs.demand_blocks()[:, 1:n_move])
    return need


def held_later(inputs: PlanInputs) -> np.ndarray:
    """[J, later blocks] GPUs a running job that cannot be preempted still holds in each later
    block: its gang in every block that ends before its remaining work does (whole steps, by its
    estimate), while its pool's capacity stays at least what it is now (a maintenance window may
    take its nodes: there the plan decides), else 0. Without it the plan saw those GPUs free from
    the next block on, and planned gangs there that step 0 could never start (overload-deadlines
    at seed 23: two 8-GPU weight-8 jobs "planned to start" an hour ahead at every decision for 8
    hours, never started)."""
    blocks, pool = inputs.blocks, inputs.job_running_pool
    block_end = blocks.first_step[1:] + blocks.n_steps[1:]  # [later] in steps from now
    runs_through = block_end[None, :] <= steps_of_work(inputs)[:, None]  # [J, later]
    stuck = (pool >= 0) & ~inputs.job_preemptible & (inputs.job_remaining_s > 0)
    avail = inputs.avail_blocks()
    steady = np.logical_and.accumulate(avail[:, 1:] >= avail[:, :1] - 1e-9, axis=1)  # [P, later]
    holds = stuck[:, None] & runs_through & steady[np.maximum(pool, 0)]
    held: np.ndarray = np.where(holds, inputs.job_gang[:, None], 0.0)
    return held


def fill_parameters(structure: ModelStructure, inputs: PlanInputs, config: PlannerConfig) -> Parameters:
    cost = np.zeros(structure.n_cols)
    lower = np.zeros(structure.n_cols)
    upper = np.full(structure.n_cols, INF)
    _job_columns(structure, inputs, config, cost, lower, upper)
    _service_columns(structure, inputs, config, cost, upper)
    row_lower = np.full(structure.n_rows, -INF)
    row_upper = np.full(structure.n_rows, INF)
    _job_rows(structure, inputs, config, row_lower, row_upper)
    _capacity_rows(structure, inputs, row_upper)
    _service_rows(structure, inputs, row_lower, row_upper)
    return Parameters(cost, lower, upper, row_lower, row_upper)


def _job_columns(
    structure: ModelStructure,
    inputs: PlanInputs,
    config: PlannerConfig,
    cost: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
) -> None:
    """Jobs' placements (value of their work, what may move) and preemptions (what they lose)."""
    cols = structure.cols
    y0, yb, pre = cols["y0"], cols["yb"], cols["pre"]
    j0, p0 = structure.y0_pairs[:, 0], structure.y0_pairs[:, 1]
    gang, run_pool = inputs.job_gang, inputs.job_running_pool
    has_work = inputs.job_remaining_s > 0
    # a job's value over a block, negated (the objective is minimised)
    gain = block_values(inputs, config) * -(inputs.blocks.dur_s / 3600.0)[None, :]
    cost[y0] = gain[:, 0][j0]
    in_pool = run_pool[j0] == p0
    movable = ((run_pool[j0] < 0) | in_pool) & has_work[j0] & inputs.job_allowed[j0, p0]
    upper[y0] = np.where(movable, gang[j0], 0.0)
    pinned = in_pool & ~inputs.job_preemptible[j0] & has_work[j0]  # in_pool: the job runs there
    lower[y0] = np.where(pinned, gang[j0], 0.0)
    cost[yb] = gain[:, 1:]
    upper[yb] = np.where(inputs.job_allowed.any(axis=1) & has_work, gang, 0.0)[:, None]
    lower[yb] = held_later(inputs)
    # pre[j] counts preempted GPUs of the gang: lost work plus the disruption, per GPU
    per_gpu = np.maximum(gang, 1.0)
    cost[pre] = inputs.job_weight * (
        inputs.job_lost_gpu_s / 3600.0 / per_gpu + config.preemption_penalty_gpu_h
    )
    upper[pre] = np.where((run_pool >= 0) & inputs.job_preemptible, gang, 0.0)
    # late[j]: GPU-hours left past the deadline, up to all the row asks for (none without a row)
    cost[cols["late"]] = config.deadline_penalty * top_job_value(inputs, config)
    upper[cols["late"]] = deadline_requirement(inputs)


def _service_columns(
    structure: ModelStructure, inputs: PlanInputs, config: PlannerConfig, cost: np.ndarray, upper: np.ndarray
) -> None:
    """Services' replicas and GPUs (their cost, interference), churn and shortfalls."""
    cols = structure.cols
    dur_h = inputs.blocks.dur_s / 3600.0
    w_max = inputs.max_weight
    s_of = structure.sp_pairs[:, 0]
    gpr = inputs.svc_gpr[s_of]
    upper[cols["R"]] = inputs.svc_max[s_of][:, None]
    interference = config.interference_cost * w_max * dur_h[None, :]
    gpu_cost = service_gpu_cost(inputs, config, structure.sp_pairs)[:, None] * (w_max * dur_h)[None, :]
    gpu_cost -= interference
    shared = structure.sp_shared
    # where a pair cannot time-slice, G = gpr * R has no column: its cost moves onto R
    cost[cols["R"]] = interference * gpr[:, None] + np.where(shared, 0.0, gpr)[:, None] * gpu_cost
    cost[cols["G"]] = gpu_cost[shared]
    cost[cols["up0"]] = config.churn_penalty_gpu * w_max
    cost[cols["up"]] = config.churn_penalty_gpu * w_max
    short_cost = shortfall_cost_per_gpu_h(inputs, config)
    cost[cols["short"]] = short_cost * dur_h[None, :]
    cost[cols["move_short"]] = short_cost * inputs.svc_startup_s[:, None] / 3600.0
    if config.shortfall_penalty > 0:
        per_short = config.min_replica_penalty / config.shortfall_penalty * short_cost
        cost[cols["minshort"]] = per_short * (dur_h[None, :] * inputs.svc_gpr[:, None])


def _job_rows(
    structure: ModelStructure,
    inputs: PlanInputs,
    config: PlannerConfig,
    row_lower: np.ndarray,
    row_upper: np.ndarray,
) -> None:
    """Gangs, remaining work, preemption links (running jobs), keep-running rows, the bound."""
    rows, gang = structure.rows, inputs.job_gang
    running = inputs.job_running_pool >= 0
    row_upper[rows["gang0"]] = gang
    row_upper[rows["work"]] = inputs.job_remaining_s
    row_lower[rows["preempt_link"]] = np.where(running, gang, 0.0)
    if inputs.blocks.count > 1:
        n_keep = rows["keep_running"].shape[1]  # the first blocks after step 0 have the rows
        block_end_s = inputs.blocks.dur_s[: 1 + n_keep].cumsum()[1:]
        fills = inputs.job_remaining_s[:, None] >= gang[:, None] * block_end_s[None, :] - 1e-6
        movable_now = running & inputs.job_preemptible
        row_lower[rows["keep_running"]] = np.where(movable_now[:, None] & fills, gang[:, None], 0.0)
    row_upper[rows["preempt_bound"]] = float(config.max_preemptions_per_step)
    need = deadline_requirement(inputs)
    row_lower[rows["deadline"]] = np.where(need > 0, need, -INF)


def _capacity_rows(structure: ModelStructure, inputs: PlanInputs, row_upper: np.ndarray) -> None:
    """Pool capacity in step 0, pool sets' capacity later, team quotas."""
    rows, avail = structure.rows, inputs.avail_blocks()
    row_upper[rows["cap0"]] = avail[:, 0]
    if inputs.blocks.count > 1:
        row_upper[rows["hall"]] = structure.hall_sets.astype(float) @ avail[:, 1:]
    if structure.quota_teams:
        # Never below what non-preemptible running jobs already hold (they cannot be stopped).
        stuck = (inputs.job_running_pool >= 0) & ~inputs.job_preemptible
        pinned_gpus = np.bincount(
            inputs.job_team[stuck], weights=inputs.job_gang[stuck], minlength=inputs.team_quota.size
        )
        floor = np.maximum(inputs.team_quota, pinned_gpus).tolist()
        by_name = dict(zip(inputs.team_names, floor, strict=True))
        quota = np.asarray([by_name.get(t, INF) for t in structure.quota_teams])
        row_upper[rows["quota"]] = quota[:, None]
        row_upper[rows["lending"]] = inputs.quota_idle


def _service_rows(
    structure: ModelStructure, inputs: PlanInputs, row_lower: np.ndarray, row_upper: np.ndarray
) -> None:
    """SLO coverage (demand), packing, replica bounds, GPUs added against those running now."""
    rows = structure.rows
    row_lower[rows["cover"]] = inputs.demand_blocks()
    row_lower[rows["pack"]] = 0.0
    row_upper[rows["dedicated"]] = 0.0
    row_lower[rows["min_replicas"]] = inputs.svc_min[:, None]
    row_upper[rows["max_replicas"]] = inputs.svc_max[:, None]
    row_lower[rows["scale_up"]] = 0.0
    s_of, p_of = structure.sp_pairs[:, 0], structure.sp_pairs[:, 1]
    row_lower[rows["scale_up0"]] = -inputs.svc_replicas_now[s_of, p_of] * inputs.svc_gpr[s_of]
    row_lower[rows["kept"]] = kept_demand(inputs)
    row_lower[rows["scale_up1"]] = 0.0

"""The horizon model stated in Pyomo: the readable source of truth of what the planner optimises.

Stages 3-4 of a decision when ``backend='pyomo'`` (PlannerConfig): built and solved in memory
from the PlanInputs, instead of optimizer/model_update.py and optimizer/solve_highs.py. The hot
path (optimizer/formulation.py + optimizer/parameters.py) encodes the same model as a HiGHS
matrix; this module shares none of their code: it works out its own coefficients (job values,
shortfall and service costs, the Hall pool sets, the keep-running blocks) from the inputs, so
tests/optimizer/test_pyomo_equivalence.py, which solves both on the same instances and checks that
the objectives agree, catches a mistake in either. Pure.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import pyomo.environ as pyo
from pyomo.contrib.appsi.solvers import Highs as AppsiHighs

from optimizer.config import PlannerConfig
from optimizer.formulation import move_blocks
from optimizer.inputs import PlanInputs
from optimizer.parameters import held_later, kept_demand

HALL_SET_LIMIT = 24
"""Pool sets of jobs' allowed pools with a capacity row in later blocks (most GPUs first),
besides each pool and all pools."""
KEEP_RUNNING_STEPS = 8
"""Later blocks starting within this many steps keep a running job's preemption cost."""


@dataclass(frozen=True)
class PyomoResult:
    status: str
    objective: float
    solver_ms: float
    relaxed: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None
    detail: str = ""


def job_value(inputs: PlanInputs, config: PlannerConfig, j: int, b: int) -> float:
    """Value of one GPU-hour of job j in block b: its weight, more the earlier, and a little more
    the fewer hours of work its gang has left (PlannerConfig.finish_bonus)."""
    first, steps = float(inputs.blocks.first_step[b]), float(inputs.blocks.n_steps[b])
    mid = first + steps / 2.0
    hours_left = float(inputs.job_remaining_s[j]) / max(float(inputs.job_gang[j]), 1.0) / 3600.0
    head = config.finish_hours + float(inputs.job_waited_s[j]) / 3600.0  # its response ratio
    nearly_done = config.finish_bonus * head / (head + hours_left)
    weight = float(inputs.job_weight[j]) * (1.0 + nearly_done)
    return weight * (1.0 + config.earliness * (1.0 - mid / inputs.horizon_steps))


def shortfall_cost(inputs: PlanInputs, config: PlannerConfig) -> float:
    """Cost of an uncovered GPU-hour: above any job's GPU-hour, so the SLO comes first (in units of
    1.25 x the most a job's GPU-hour is worth, the unit the setting had before deadlines were rows)."""
    return config.shortfall_penalty * (inputs.max_weight * (1.0 + config.earliness) * 1.25)


def late_cost(inputs: PlanInputs, config: PlannerConfig) -> float:
    """Cost of a GPU-hour of work left past a deadline: above any job's GPU-hour, below the SLO's."""
    return config.deadline_penalty * inputs.max_weight * (1.0 + config.earliness)


def deadline_plan(inputs: PlanInputs, config: PlannerConfig, j: int) -> tuple[float, int]:
    """(GPU-hours job j's deadline asks for, the step it is planned to finish by). It asks for its
    remaining work if its gang running from now on can still do it before the deadline (inside the
    horizon), to be done ``deadline_margin_s`` early where that is still possible; else nothing."""
    remaining_s, gang = float(inputs.job_remaining_s[j]), max(float(inputs.job_gang[j]), 1.0)
    deadline = int(inputs.job_deadline_step[j])
    steps_needed = math.ceil(remaining_s / (gang * inputs.step_s) - 1e-9)
    reachable = deadline <= inputs.horizon_steps and steps_needed <= deadline
    if not (reachable and remaining_s > 0 and inputs.job_allowed[j].any()):
        return 0.0, deadline
    margin = math.ceil(config.deadline_margin_s / inputs.step_s - 1e-9)
    return remaining_s / 3600.0, max(deadline - margin, steps_needed)


def hours_before(inputs: PlanInputs, step: int, b: int) -> float:
    """Hours of block b before ``step`` (the share of its steps before it)."""
    first, steps = float(inputs.blocks.first_step[b]), float(inputs.blocks.n_steps[b])
    share = min(max((float(step) - first) / steps, 0.0), 1.0)
    return share * float(inputs.blocks.dur_s[b]) / 3600.0


def pool_sets(inputs: PlanInputs) -> list[tuple[bool, ...]]:
    """The pool sets with a capacity row in later blocks: each pool, all pools, and the allowed
    sets (of two pools or more, not all) of the jobs holding the most GPUs."""
    n_pools = inputs.n_pools
    gpus: dict[tuple[bool, ...], float] = {}
    for j in range(inputs.n_jobs):
        allowed = tuple(bool(v) for v in inputs.job_allowed[j])
        if 1 < sum(allowed) < n_pools:
            gpus[allowed] = gpus.get(allowed, 0.0) + float(inputs.job_gang[j])
    top = sorted(gpus, key=lambda k: (-gpus[k], k))[:HALL_SET_LIMIT]
    singles = [tuple(q == p for q in range(n_pools)) for p in range(n_pools)]
    return singles + top + ([tuple([True] * n_pools)] if n_pools > 1 else [])


def build_pyomo_model(inputs: PlanInputs, config: PlannerConfig) -> pyo.ConcreteModel:
    m = pyo.ConcreteModel("ebbtide_horizon")
    _sets_and_variables(m, inputs)
    _job_constraints(m, inputs, config)
    _capacity_constraints(m, inputs)
    _quota_constraints(m, inputs)
    _service_constraints(m, inputs)
    _objective(m, inputs, config)
    return m


def _sets_and_variables(m: pyo.ConcreteModel, inputs: PlanInputs) -> None:
    gang, run_pool = inputs.job_gang, inputs.job_running_pool
    has_work = inputs.job_remaining_s > 0
    m.J = pyo.Set(initialize=range(inputs.n_jobs))
    m.P = pyo.Set(initialize=range(inputs.n_pools))
    m.S = pyo.Set(initialize=range(inputs.n_services))
    m.B = pyo.Set(initialize=range(inputs.blocks.count))
    m.LATER = pyo.Set(initialize=range(1, inputs.blocks.count))
    m.JP = pyo.Set(dimen=2, initialize=[(int(j), int(p)) for j, p in np.argwhere(inputs.job_allowed)])
    m.SP = pyo.Set(dimen=2, initialize=[(int(s), int(p)) for s, p in np.argwhere(inputs.svc_allowed)])
    m.pools_of_job = {j: [p for (jj, p) in m.JP if jj == j] for j in range(inputs.n_jobs)}
    m.pools_of_svc = {s: [p for (ss, p) in m.SP if ss == s] for s in range(inputs.n_services)}

    def y0_bounds(_m: pyo.ConcreteModel, j: int, p: int) -> tuple[float, float]:
        movable = (run_pool[j] < 0 or run_pool[j] == p) and has_work[j]
        pinned = run_pool[j] == p and not inputs.job_preemptible[j] and has_work[j]
        return (float(gang[j]) if pinned else 0.0, float(gang[j]) if movable else 0.0)

    held = held_later(inputs)  # a running job that cannot be preempted holds its GPUs while it runs

    def yb_bounds(_m: pyo.ConcreteModel, j: int, b: int) -> tuple[float, float]:
        return (float(held[j, b - 1]), float(gang[j]) if inputs.job_allowed[j].any() and has_work[j] else 0.0)

    def pre_bounds(_m: pyo.ConcreteModel, j: int) -> tuple[float, float]:
        return (0.0, 1.0 if run_pool[j] >= 0 and inputs.job_preemptible[j] else 0.0)

    m.y0 = pyo.Var(m.JP, bounds=y0_bounds)
    m.yb = pyo.Var(m.J, m.LATER, bounds=yb_bounds)
    m.pre = pyo.Var(m.J, bounds=pre_bounds)
    m.R = pyo.Var(m.SP, m.B, bounds=lambda _m, s, p, b: (0.0, float(inputs.svc_max[s])))
    m.G = pyo.Var(m.SP, m.B, domain=pyo.NonNegativeReals)
    m.up0 = pyo.Var(m.SP, domain=pyo.NonNegativeReals)  # GPUs added in step 0, per pool
    m.up = pyo.Var(m.S, m.LATER, domain=pyo.NonNegativeReals)  # later blocks: per service
    m.short = pyo.Var(m.S, m.B, domain=pyo.NonNegativeReals)
    m.minshort = pyo.Var(m.S, m.B, domain=pyo.NonNegativeReals)


def _job_constraints(m: pyo.ConcreteModel, inputs: PlanInputs, config: PlannerConfig) -> None:
    """Gang in step 0, remaining work, preemption (link, keep-running, bound)."""
    gang, run_pool, dur_s, pools_of = (
        inputs.job_gang,
        inputs.job_running_pool,
        inputs.blocks.dur_s,
        m.pools_of_job,
    )
    m.gang0 = pyo.Constraint(m.J, rule=lambda _m, j: sum(_m.y0[j, p] for p in pools_of[j]) <= gang[j])
    m.work = pyo.Constraint(
        m.J,
        rule=lambda _m, j: (
            dur_s[0] * sum(_m.y0[j, p] for p in pools_of[j]) + sum(dur_s[b] * _m.yb[j, b] for b in _m.LATER)
            <= inputs.job_remaining_s[j]
        ),
    )
    m.preempt_link = pyo.Constraint(
        m.J,
        rule=lambda _m, j: (
            _m.pre[j] + sum(_m.y0[j, p] for p in pools_of[j]) / gang[j] >= (1.0 if run_pool[j] >= 0 else 0.0)
        ),
    )
    block_end_s = np.cumsum(dur_s)
    starts = inputs.blocks.first_step

    def keep_running_rule(_m: pyo.ConcreteModel, j: int, b: int) -> object:
        fills = inputs.job_remaining_s[j] >= gang[j] * block_end_s[b] - 1e-6
        soon = starts[b] < KEEP_RUNNING_STEPS
        if run_pool[j] < 0 or not inputs.job_preemptible[j] or not fills or not soon:
            return pyo.Constraint.Skip
        return _m.pre[j] + _m.yb[j, b] / gang[j] >= 1.0

    m.keep_running = pyo.Constraint(m.J, m.LATER, rule=keep_running_rule)
    m.preempt_bound = pyo.Constraint(expr=sum(m.pre[j] for j in m.J) <= config.max_preemptions_per_step)
    _deadline_constraints(m, inputs, config)


def _deadline_constraints(m: pyo.ConcreteModel, inputs: PlanInputs, config: PlannerConfig) -> None:
    """A deadline in reach: the GPU-hours before its planned finish, plus what is left late, cover
    the remaining work."""
    plan = {j: deadline_plan(inputs, config, j) for j in range(inputs.n_jobs)}
    m.DL = pyo.Set(initialize=[j for j in range(inputs.n_jobs) if plan[j][0] > 0])
    m.late = pyo.Var(m.DL, bounds=lambda _m, j: (0.0, plan[j][0]))

    def deadline_rule(_m: pyo.ConcreteModel, j: int) -> object:
        need, by = plan[j]
        done = sum(hours_before(inputs, by, 0) * _m.y0[j, p] for p in _m.pools_of_job[j])
        done += sum(hours_before(inputs, by, b) * _m.yb[j, b] for b in _m.LATER)
        return done + _m.late[j] >= need

    m.deadline = pyo.Constraint(m.DL, rule=deadline_rule)


def _capacity_constraints(m: pyo.ConcreteModel, inputs: PlanInputs) -> None:
    """Each pool's GPUs in step 0; each pool set's in later blocks (jobs' later blocks aggregate pools)."""
    avail = inputs.avail_blocks()
    m.cap0 = pyo.Constraint(
        m.P,
        rule=lambda _m, p: (
            sum(_m.y0[j, pp] for (j, pp) in _m.JP if pp == p)
            + sum(_m.G[s, pp, 0] for (s, pp) in _m.SP if pp == p)
            <= avail[p, 0]
        ),
    )
    sets = pool_sets(inputs)
    m.F = pyo.Set(initialize=range(len(sets)))
    allowed = [set(np.flatnonzero(inputs.job_allowed[j]).tolist()) for j in range(inputs.n_jobs)]
    inside = {
        f: [j for j in range(inputs.n_jobs) if allowed[j] and all(sets[f][p] for p in allowed[j])]
        for f in range(len(sets))
    }
    m.hall = pyo.Constraint(
        m.F,
        m.LATER,
        rule=lambda _m, f, b: (
            sum(_m.yb[j, b] for j in inside[f]) + sum(_m.G[s, p, b] for (s, p) in _m.SP if sets[f][p])
            <= sum(float(avail[p, b]) for p in range(inputs.n_pools) if sets[f][p])
        ),
    )


def _quota_constraints(m: pyo.ConcreteModel, inputs: PlanInputs) -> None:
    """Team quotas in every block, never below what non-preemptible running jobs hold, with lending
    (optimizer/quota.py): a team's GPUs beyond its quota are borrowed, all borrow at most the idle quota."""
    gang, run_pool = inputs.job_gang, inputs.job_running_pool
    m.Q = pyo.Set(initialize=[int(t) for t in np.flatnonzero(np.isfinite(inputs.team_quota))])
    m.borrow = pyo.Var(m.Q, m.B, domain=pyo.NonNegativeReals)

    def quota_rule(_m: pyo.ConcreteModel, t: int, b: int) -> object:
        members = [j for j in range(inputs.n_jobs) if inputs.job_team[j] == t]
        if b == 0:
            used = sum(_m.y0[j, p] for j in members for p in _m.pools_of_job[j])
        else:
            used = sum(_m.yb[j, b] for j in members)
        if isinstance(used, int | float):
            return pyo.Constraint.Skip
        pinned = sum(gang[j] for j in members if run_pool[j] >= 0 and not inputs.job_preemptible[j])
        return used - _m.borrow[t, b] <= max(float(inputs.team_quota[t]), float(pinned))

    m.quota = pyo.Constraint(m.Q, m.B, rule=quota_rule)

    def lending_rule(_m: pyo.ConcreteModel, b: int) -> object:
        if not _m.Q:
            return pyo.Constraint.Skip
        return sum(_m.borrow[t, b] for t in _m.Q) <= inputs.quota_idle

    m.lending = pyo.Constraint(m.B, rule=lending_rule)


def _service_constraints(m: pyo.ConcreteModel, inputs: PlanInputs) -> None:
    """SLO coverage: capacity (less interference losses and replicas still loading) covers demand."""
    dur_s, demand, pools_of_svc = inputs.blocks.dur_s, inputs.demand_blocks(), m.pools_of_svc
    loss = inputs.svc_loss
    gpr = inputs.svc_gpr

    def cover_rule(_m: pyo.ConcreteModel, s: int, b: int) -> object:
        lead = min(inputs.svc_startup_s[s] / dur_s[b], 1.0)
        capacity = sum(
            (1.0 + loss[s, p]) * _m.G[s, p, b] - loss[s, p] * gpr[s] * _m.R[s, p, b] for p in pools_of_svc[s]
        )
        starting = sum(_m.up0[s, p] for p in pools_of_svc[s]) if b == 0 else _m.up[s, b]
        return capacity - lead * starting + _m.short[s, b] >= demand[s, b]

    m.cover = pyo.Constraint(m.S, m.B, rule=cover_rule)
    _replica_constraints(m, inputs)


def _replica_constraints(m: pyo.ConcreteModel, inputs: PlanInputs) -> None:
    """Time-slicing packing, replica bounds, GPUs added (step 0 per pool, later per service)."""
    gpr, pools_of_svc = inputs.svc_gpr, m.pools_of_svc
    m.pack = pyo.Constraint(
        m.SP,
        m.B,
        rule=lambda _m, s, p, b: inputs.svc_tenants[s, p] * _m.G[s, p, b] - gpr[s] * _m.R[s, p, b] >= 0,
    )
    m.dedicated = pyo.Constraint(
        m.SP, m.B, rule=lambda _m, s, p, b: _m.G[s, p, b] - gpr[s] * _m.R[s, p, b] <= 0
    )
    m.min_replicas = pyo.Constraint(
        m.S,
        m.B,
        rule=lambda _m, s, b: (
            sum(_m.R[s, p, b] for p in pools_of_svc[s]) + _m.minshort[s, b] >= inputs.svc_min[s]
        ),
    )
    m.max_replicas = pyo.Constraint(
        m.S,
        m.B,
        rule=lambda _m, s, b: (
            sum(_m.R[s, p, b] for p in pools_of_svc[s]) <= inputs.svc_max[s]
            if pools_of_svc[s]
            else pyo.Constraint.Skip
        ),
    )

    m.scale_up0 = pyo.Constraint(
        m.SP, rule=lambda _m, s, p: _m.up0[s, p] >= _m.G[s, p, 0] - inputs.svc_replicas_now[s, p] * gpr[s]
    )
    need, n_move = kept_demand(inputs), move_blocks(inputs)
    m.MOVE = pyo.Set(initialize=range(n_move))
    m.up1 = pyo.Var(m.SP, domain=pyo.NonNegativeReals)  # GPUs added in block 1 over step 0, per pool
    m.move_short = pyo.Var(m.S, m.MOVE, domain=pyo.NonNegativeReals)  # demand the kept leave short

    def kept_rule(_m: pyo.ConcreteModel, s: int, k: int) -> object:
        """Replicas kept into block k (its GPUs less those it adds) carry the demand while added
        ones start up."""
        added = _m.up0 if k == 0 else _m.up1
        kept = sum(_m.G[s, p, k] - added[s, p] for p in pools_of_svc[s])
        return kept + _m.move_short[s, k] >= float(need[s, k])

    m.kept = pyo.Constraint(m.S, m.MOVE, rule=kept_rule)
    m.scale_up1 = pyo.Constraint(
        m.SP,
        rule=lambda _m, s, p: (
            _m.up1[s, p] >= _m.G[s, p, 1] - _m.G[s, p, 0] if n_move > 1 else pyo.Constraint.Skip
        ),
    )

    def scale_up_rule(_m: pyo.ConcreteModel, s: int, b: int) -> object:
        if not pools_of_svc[s]:
            return pyo.Constraint.Skip
        return _m.up[s, b] >= sum(_m.G[s, p, b] - _m.G[s, p, b - 1] for p in pools_of_svc[s])

    m.scale_up = pyo.Constraint(m.S, m.LATER, rule=scale_up_rule)


def _objective(m: pyo.ConcreteModel, inputs: PlanInputs, config: PlannerConfig) -> None:
    """Value of the work done, less shortfall, preemption, service GPUs, interference, churn and
    work left past deadlines."""
    dur_h, gang, gpr, w_max = inputs.blocks.dur_s / 3600.0, inputs.job_gang, inputs.svc_gpr, inputs.max_weight
    short_cost = shortfall_cost(inputs, config)
    interference = config.interference_cost * w_max
    min_short_cost = (
        config.min_replica_penalty / config.shortfall_penalty * short_cost
        if config.shortfall_penalty
        else 0.0
    )
    away = 1.0 + config.stay_preference  # a GPU-hour where the service runs no replica now
    gpu_cost = {
        (s, p): config.service_gpu_cost * (away if inputs.svc_replicas_now[s, p] == 0 else 1.0)
        for (s, p) in m.SP
    }
    m.value = pyo.Expression(
        expr=sum(job_value(inputs, config, j, 0) * dur_h[0] * m.y0[j, p] for (j, p) in m.JP)
        + sum(job_value(inputs, config, j, b) * dur_h[b] * m.yb[j, b] for j in m.J for b in m.LATER)
    )
    m.losses = pyo.Expression(
        expr=sum(
            inputs.job_weight[j]
            * (inputs.job_lost_gpu_s[j] / 3600.0 + config.preemption_penalty_gpu_h * gang[j])
            * m.pre[j]
            for j in m.J
        )
        + sum(
            short_cost * dur_h[b] * m.short[s, b] + min_short_cost * dur_h[b] * gpr[s] * m.minshort[s, b]
            for s in m.S
            for b in m.B
        )
        + sum(short_cost * inputs.svc_startup_s[s] / 3600.0 * m.move_short[s, k] for s in m.S for k in m.MOVE)
        + sum(
            interference * dur_h[b] * (gpr[s] * m.R[s, p, b] - m.G[s, p, b])
            + gpu_cost[s, p] * w_max * dur_h[b] * m.G[s, p, b]
            for (s, p) in m.SP
            for b in m.B
        )
        + config.churn_penalty_gpu
        * w_max
        * (sum(m.up0[s, p] for (s, p) in m.SP) + sum(m.up[s, b] for s in m.S for b in m.LATER))
        + late_cost(inputs, config) * sum(m.late[j] for j in m.DL)
    )
    m.objective = pyo.Objective(expr=m.value - m.losses, sense=pyo.maximize)


def solve_with_pyomo(inputs: PlanInputs, config: PlannerConfig, time_limit_s: float) -> PyomoResult:
    model = build_pyomo_model(inputs, config)
    solver = AppsiHighs()
    solver.config.time_limit = time_limit_s
    solver.config.load_solution = False
    solver.config.stream_solver = False
    t0 = time.perf_counter()
    try:
        results = solver.solve(model)
    except Exception as exc:
        return PyomoResult(
            "error", float("nan"), (time.perf_counter() - t0) * 1000.0, None, f"Pyomo/HiGHS error: {exc!r}"
        )
    solver_ms = (time.perf_counter() - t0) * 1000.0
    condition = str(results.termination_condition)
    if "optimal" not in condition.lower():
        return PyomoResult(condition, float("nan"), solver_ms, None, f"Pyomo/HiGHS: {condition}")
    results.solution_loader.load_vars()
    n_jobs, n_pools, n_svc, n_blocks = inputs.n_jobs, inputs.n_pools, inputs.n_services, inputs.blocks.count
    gang = np.maximum(inputs.job_gang, 1.0)
    share0 = np.zeros((n_jobs, n_pools))
    for (j, p), var in model.y0.items():
        share0[j, p] = (var.value or 0.0) / gang[j]
    share = np.zeros((n_jobs, n_blocks))
    share[:, 0] = share0.sum(axis=1)
    for (j, b), var in model.yb.items():
        share[j, b] = (var.value or 0.0) / gang[j]
    replicas = np.zeros((n_svc, n_pools, n_blocks))
    gpus = np.zeros((n_svc, n_pools, n_blocks))
    for (s, p, b), var in model.R.items():
        replicas[s, p, b] = var.value or 0.0
        gpus[s, p, b] = model.G[s, p, b].value or 0.0
    relaxed = (replicas, gpus, np.clip(share0, 0, 1), np.clip(share, 0, 1))
    return PyomoResult(condition, float(results.best_feasible_objective), solver_ms, relaxed)

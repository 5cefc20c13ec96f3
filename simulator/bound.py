"""``bound``: an offline LP relaxation of a whole scenario window, the ceiling no policy can pass.

Where it sits: beside the policies in the benchmark, but it is not a policy and never runs in the
loop. It reads a fresh Simulator (same scenario and seed as every policy's run) with everything
known: every arrival, every job's TRUE work, every service's TRUE demand and every pool's GPUs up
at each sub-tick (the simulator's resolution), summed per decision step.

The relaxation (GPU-hours throughout; t a decision step, p a pool, j a job, v a service):

- x[j,p,t] >= 0: batch work of job j on pool p in step t, only on pools j may use (allowed pools
  and GPU types, gang no larger than the pool) and only from j's arrival; at most gpus_j x the
  part of step t after the arrival, also summed over pools (a gang runs in one place at a time).
- sum_{p,t} x[j,p,t] <= true work of j (it cannot do more than it has). No integrality: jobs are
  divisible work that may move between pools and steps freely, every bit of it kept (as if it
  checkpointed continuously), with no restart cost, no gang placement on nodes, no start-up lead.
- s[v,p,t] >= 0: inference served, sum_p s[v,p,t] <= true demand of v in step t (served at most
  once), on v's allowed pools; sum_j x[j,p,t] + sum_v s[v,p,t] <= GPU-time up on p in step t.
- sum_{v,p,t} s >= min((1 - sigma) x total demand, the most inference the GPUs can serve): a
  policy's inference service level (where demand outruns the GPUs no policy serves it in full, so
  the floor is capped at what can be served, computed once by the same LP maximising service).

A closed-loop workload (``population``: a new job each time one of the loop's finishes) has no
bound here: its arrivals depend on the policy, so the window's jobs are not known beforehand
(``NoBound``; the benchmark then reports none for that scenario).

Why it is an upper bound: the trajectory of ANY policy in the simulator, summed per step, is a
feasible point. A running job does at most gpus x tick of work per tick, only after it arrived,
only on a pool it may use, never past its true work; the work it keeps (PWT's definition) is at
most the work it did; inference served is min(demand, ready capacity) per tick, and ready
capacity plus the GPUs jobs hold never pass the GPUs up. Relaxing integrality, placement,
restarts and interference only enlarges the feasible set. So:

- ``pwt_at(sigma)``, max sum_j w_j x[j] with the service row at sigma, bounds the PWT of every
  policy whose SLO shortfall is sigma or more (``pwt``: sigma = 0, inference served in full;
  ``pwt_any``: sigma = 1, no inference promised: the ceiling for any policy whatsoever);
- ``utilization``, max (sum x + sum s) / GPU-time up, bounds every policy's utilization.
"""

from __future__ import annotations

from dataclasses import dataclass

import highspy
import numpy as np
import scipy.sparse as sp

from simulator.cluster import Simulator
from simulator.workload import SimJob

HOUR_S = 3600.0


class NoBound(ValueError):
    """The scenario has no offline bound (the message says why)."""


@dataclass(frozen=True)
class WindowLp:
    """The relaxation as arrays: columns (x then s), rows (work, gang, capacity, demand, service)."""

    matrix: sp.csc_matrix
    col_upper: np.ndarray
    row_lower: np.ndarray
    row_upper: np.ndarray
    pwt_cost: np.ndarray  # priority weight per x column, 0 for s
    useful_cost: np.ndarray  # 1 per column (GPU-hours useful)
    serve_cost: np.ndarray  # 1 per s column, 0 for x (GPU-hours of inference served)
    service_row: int
    demand_gpu_h: float
    capacity_gpu_h: float


@dataclass(frozen=True)
class Bound:
    pwt: float
    pwt_any: float
    utilization: float
    demand_gpu_h: float
    capacity_gpu_h: float

    def figures(self) -> dict[str, float]:
        return {
            "pwt": self.pwt,
            "pwt_any": self.pwt_any,
            "utilization": self.utilization,
            "demand_gpu_hours": self.demand_gpu_h,
            "capacity_gpu_hours": self.capacity_gpu_h,
        }


class _Builder:
    """Column and row bookkeeping: COO entries, bounds, costs."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.col_upper: list[float] = []
        self.cost: list[float] = []
        self.row_lower: list[float] = []
        self.row_upper: list[float] = []

    def col(self, upper: float, cost: float) -> int:
        self.col_upper.append(upper)
        self.cost.append(cost)
        return len(self.col_upper) - 1

    def row(self, cols: list[int], lower: float, upper: float) -> int:
        r = len(self.row_lower)
        self.row_lower.append(lower)
        self.row_upper.append(upper)
        self.rows.extend([r] * len(cols))
        self.cols.extend(cols)
        self.vals.extend([1.0] * len(cols))
        return r


def step_sums(sim: Simulator) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """GPU-hours up per pool and step [P, T], and true demand GPU-hours per service and step [T]."""
    ticks = sim.step_s // sim.tick_s
    times = [t * sim.tick_s for t in range(sim.steps * ticks)]
    dt_h = sim.tick_s / HOUR_S
    capacity = (
        np.array([[pool.gpus_up(t) * dt_h for t in times] for pool in sim.pools.values()], dtype=float)
        .reshape(len(sim.pools), sim.steps, ticks)
        .sum(axis=2)
    )
    demand = {
        v: np.array([sim.demand_at(v, t) * dt_h for t in times]).reshape(sim.steps, ticks).sum(axis=1)
        for v in sim.specs
    }
    return capacity, demand


def job_pools(sim: Simulator, job: SimJob) -> list[int]:
    """Indices of the pools a job may run on (allowed pools and types; gang no larger than the pool)."""
    spec = job.spec
    return [
        i
        for i, pool in enumerate(sim.pools.values())
        if (not spec.allowed_pools or pool.name in spec.allowed_pools)
        and (not spec.allowed_gpu_types or pool.gpu_type in spec.allowed_gpu_types)
        and spec.gpus <= pool.gpus_total
    ]


def _add_jobs(b: _Builder, sim: Simulator, by_pool_step: list[list[list[int]]]) -> None:
    """x columns, work rows and (for jobs with several pools) gang rows."""
    step_h = sim.step_s / HOUR_S
    for job in sim.arrivals:
        pools = job_pools(sim, job)
        if not pools:
            continue
        first = int(job.arrival_s // sim.step_s)
        mine: list[int] = []
        for t in range(first, sim.steps):
            avail_h = min(step_h, (t + 1) * step_h - job.arrival_s / HOUR_S)
            rate = job.spec.gpus * avail_h
            cols = [b.col(rate, job.spec.priority_weight) for _ in pools]
            for p, c in zip(pools, cols, strict=True):
                by_pool_step[p][t].append(c)
            if len(cols) > 1:
                b.row(cols, 0.0, rate)
            mine.extend(cols)
        b.row(mine, 0.0, job.true_gpu_s / HOUR_S)


def build_window_lp(sim: Simulator) -> WindowLp:
    """The relaxation of ``sim``'s whole window (see the module docstring)."""
    if sim.closed_loop:
        raise NoBound("closed-loop workload: its arrivals depend on the policy")
    capacity, demand = step_sums(sim)
    names = list(sim.pools)
    b = _Builder()
    by_pool_step: list[list[list[int]]] = [[[] for _ in range(sim.steps)] for _ in names]
    _add_jobs(b, sim, by_pool_step)
    n_x = len(b.col_upper)
    served: list[int] = []
    for v, spec in sim.specs.items():
        pools = [names.index(p) for p in (spec.allowed_pools or names) if p in names]
        for t in range(sim.steps):
            cols = [b.col(float(demand[v][t]), 0.0) for _ in pools]
            for p, c in zip(pools, cols, strict=True):
                by_pool_step[p][t].append(c)
            if len(cols) > 1:
                b.row(cols, 0.0, float(demand[v][t]))
            served.extend(cols)
    for p in range(len(names)):
        for t in range(sim.steps):
            b.row(by_pool_step[p][t], 0.0, float(capacity[p, t]))
    total_demand = float(sum(d.sum() for d in demand.values()))
    service_row = b.row(served, 0.0, highspy.kHighsInf)
    n = len(b.col_upper)
    matrix = sp.coo_matrix((b.vals, (b.rows, b.cols)), shape=(len(b.row_lower), n)).tocsc()
    pwt_cost = np.zeros(n)
    pwt_cost[:n_x] = b.cost[:n_x]
    serve_cost = np.zeros(n)
    serve_cost[served] = 1.0
    return WindowLp(
        matrix=matrix,
        col_upper=np.asarray(b.col_upper, dtype=float),
        row_lower=np.asarray(b.row_lower, dtype=float),
        row_upper=np.asarray(b.row_upper, dtype=float),
        pwt_cost=pwt_cost,
        useful_cost=np.ones(n),
        serve_cost=serve_cost,
        service_row=service_row,
        demand_gpu_h=total_demand,
        capacity_gpu_h=float(capacity.sum()),
    )


def _highs(lp: WindowLp) -> highspy.Highs:
    model = highspy.HighsLp()
    n_row, n_col = lp.matrix.shape
    model.num_col_, model.num_row_ = n_col, n_row
    model.col_cost_ = lp.pwt_cost
    model.col_lower_ = np.zeros(n_col)
    model.col_upper_ = lp.col_upper
    model.row_lower_ = lp.row_lower
    model.row_upper_ = lp.row_upper
    model.sense_ = highspy.ObjSense.kMaximize
    model.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    model.a_matrix_.start_ = lp.matrix.indptr.astype(np.int32)
    model.a_matrix_.index_ = lp.matrix.indices.astype(np.int32)
    model.a_matrix_.value_ = lp.matrix.data
    model.a_matrix_.num_col_, model.a_matrix_.num_row_ = n_col, n_row
    highs: highspy.Highs = highspy._Highs()  # type: ignore[attr-defined]
    highs.setOptionValue("output_flag", False)
    # one thread, as the planner's (optimizer/solve_highs.py): HiGHS's thread pool is global to the
    # process, and a later instance asking for another count than the first one's fails to run
    highs.setOptionValue("threads", 1)
    highs.passModel(model)
    return highs


def _optimum(highs: highspy.Highs) -> float:
    highs.run()
    status = highs.getModelStatus()
    if status != highspy.HighsModelStatus.kOptimal:
        raise RuntimeError(f"bound LP: HiGHS ended {highs.modelStatusToString(status)}")
    return float(highs.getInfo().objective_function_value)


class WindowBound:
    """The relaxation of one window, solved on demand: PWT at a service level, utilization."""

    def __init__(self, sim: Simulator) -> None:
        self.lp = build_window_lp(sim)
        self.highs = _highs(self.lp)
        self._pwt: dict[float, float] = {}
        self.servable_gpu_h = self._best_of(self.lp.serve_cost)

    def pwt_at(self, shortfall: float) -> float:
        """Most PWT any policy with SLO shortfall ``shortfall`` (or more) can reach."""
        sigma = min(max(round(shortfall, 9) + 1e-9, 0.0), 1.0)
        if sigma not in self._pwt:
            floor = min((1.0 - sigma) * self.lp.demand_gpu_h, self.servable_gpu_h)
            self.highs.changeRowBounds(self.lp.service_row, floor, highspy.kHighsInf)
            self._pwt[sigma] = _optimum(self.highs)
        return self._pwt[sigma]

    def utilization(self) -> float:
        """Most utilization any policy can reach (service level free)."""
        return self._best_of(self.lp.useful_cost) / max(self.lp.capacity_gpu_h, 1e-12)

    def _best_of(self, cost: np.ndarray) -> float:
        """The most of ``cost`` over the window's feasible set, service level free."""
        highs = _highs(self.lp)
        n = cost.size
        highs.changeColsCost(n, np.arange(n, dtype=np.int32), cost)
        return _optimum(highs)

    def summary(self) -> Bound:
        return Bound(
            pwt=self.pwt_at(0.0),
            pwt_any=self.pwt_at(1.0),
            utilization=self.utilization(),
            demand_gpu_h=self.lp.demand_gpu_h,
            capacity_gpu_h=self.lp.capacity_gpu_h,
        )

"""The horizon model's structure as a sparse matrix (HiGHS's form), built from PlanInputs.

This is the hot-path encoding of the model that optimizer/pyomo_model.py states in Pyomo; a test
solves both on the same instances and checks the objectives agree. Columns (in GPUs unless
noted), per time block b (step 0 is block 0):

- ``y0[j,p]``  GPUs of job j in pool p in step 0 (0..gang; made all-or-nothing on extraction)
- ``yb[j,b]``  GPUs of job j in block b >= 1 (pools aggregated; Hall rows keep it placeable)
- ``pre[j]``   job j preempted now (0..1)
- ``R[s,p,b]`` replicas of service s in pool p; ``G[s,p,b]`` physical GPUs under them
  (G = gpr*R dedicated, down to gpr*R/k when k tenants time-slice one GPU). Where a service
  cannot time-slice in a pool (one tenant per GPU) the packing rows force G = gpr*R, so the
  matrix has no G column nor packing rows there and uses gpr*R in G's place: the same model
  in a smaller LP (about a quarter fewer rows at seed scale). The packing rows are the limit on
  time-slicing: k = min(pool max_share, the service's max_cotenants) of its replicas per GPU. A
  latency-critical service must also keep its GPUs to itself (a fraction would be time-sliced
  with other services' replicas); an LP cannot state whole GPUs, so the rounding
  (optimizer/rounding.py) makes its G whole in every block, within the same packing limits;
- ``up0[s,p]`` GPUs added to a pool in step 0, against the replicas running there now;
  ``up[s,b]`` GPUs a service adds in block b >= 1, over all its pools (lead time and churn).
  Later blocks count what a service adds, not where: they are re-planned every step, as jobs'
  later blocks aggregate pools, and per pool they held about a quarter of the LP at seed scale
- ``short[s,b]`` uncovered demand; ``minshort[s,b]`` replicas missing under min_replicas
- ``move_short[s,k]`` demand now that the replicas kept into block k (k = 0, 1: its GPUs less
  those it adds, per pool; ``up1[s,p]`` GPUs added in block 1) leave uncovered while the added
  ones start up: a service moved between pools loses its old replicas at once (rows ``kept``;
  priced for the service's ``startup_s``, optimizer/parameters.py)
- ``borrow[t,b]`` GPUs team t holds beyond its quota, lent by idle quotas (optimizer/quota.py)
- ``late[j]``  GPU-hours of job j's remaining work its deadline row leaves past the deadline

Deadlines are rows (``deadline[j]``): the GPU-hours planned for job j in the blocks before its
deadline (the block the deadline falls in by the share of its steps before it) plus ``late[j]``
cover its remaining work. A row plans the job to finish a margin before the deadline where the job
still can (PlannerConfig.deadline_margin_s). Whether a job has the row, and the price of
``late``, are bounds and costs (optimizer/parameters.py: only deadlines in reach ask for work).

The matrix depends only on the structure (which jobs with which gangs and allowed pools, which
services, pools and blocks), never on demand, capacity, weights or progress: those live in costs
and bounds (optimizer/parameters.py), so a persistent solver updates only them between steps.
Two kinds of coefficient move with the job in a slot and are updated in place
(optimizer/slot_updates.py): its gang's (the preemption bound) and its deadline's (which blocks
lie before it).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

import numpy as np

from optimizer.deadlines import deadline_coefficients
from optimizer.inputs import PlanInputs

INF = np.inf
MAX_HALL_SETS = 24
"""Pool sets with their own capacity row in later blocks, besides single pools and all pools."""


@dataclass(frozen=True)
class ColumnMatrix:
    """A sparse matrix in compressed-column form (HiGHS's kColwise): duplicates summed."""

    indptr: np.ndarray  # [n_cols + 1]
    indices: np.ndarray  # row of each entry
    data: np.ndarray
    n_rows: int

    @classmethod
    def from_triplets(
        cls, n_rows: int, n_cols: int, rows: np.ndarray, cols: np.ndarray, values: np.ndarray
    ) -> ColumnMatrix:
        key = cols.astype(np.int64) * max(n_rows, 1) + rows.astype(np.int64)
        unique, inverse = np.unique(key, return_inverse=True)
        data = np.bincount(inverse, weights=values, minlength=unique.size)
        col_of = unique // max(n_rows, 1)
        indptr = np.zeros(n_cols + 1, dtype=np.int64)
        np.cumsum(np.bincount(col_of, minlength=n_cols), out=indptr[1:])
        return cls(indptr, (unique % max(n_rows, 1)).astype(np.int64), data.astype(float), n_rows)

    @cached_property
    def entry_cols(self) -> np.ndarray:
        """The column of each stored entry."""
        return np.repeat(np.arange(self.indptr.size - 1, dtype=np.int64), np.diff(self.indptr))

    @cached_property
    def by_row(self) -> tuple[np.ndarray, np.ndarray]:
        """(row pointer, entry order): the stored entries row by row, as positions into ``data``
        (so values changed in place read through)."""
        order = np.argsort(self.indices, kind="stable")
        row_ptr = np.zeros(self.n_rows + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.indices, minlength=self.n_rows), out=row_ptr[1:])
        return row_ptr, order

    def entry_at(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """The position in ``data`` of each stored (row, col): entries are stored column by column,
        rows ascending within each, so their (column, row) keys are sorted."""
        n_rows = max(self.n_rows, 1)
        keys = self.entry_cols * n_rows + self.indices
        at: np.ndarray = np.searchsorted(keys, np.asarray(cols, dtype=np.int64) * n_rows + rows)
        return at.astype(np.int64)


@dataclass(frozen=True)
class ModelStructure:
    key: str
    n_cols: int
    n_rows: int
    matrix: ColumnMatrix
    cols: dict[str, np.ndarray]  # column group -> indices shaped by its index sets
    rows: dict[str, np.ndarray]  # row group -> indices
    y0_pairs: np.ndarray  # [n, 2] (job, pool) of each y0 column
    sp_pairs: np.ndarray  # [m, 2] (service, pool) of each service column row
    sp_shared: np.ndarray  # [m] bool: the pair may time-slice (has G columns; else G = gpr*R)
    hall_sets: np.ndarray  # [F, P] bool, fixed for the structure's life
    quota_teams: tuple[str, ...]  # teams with a quota row, by name
    slot_gang: np.ndarray  # [J] what the matrix encodes now per job slot (updated in place)
    slot_hall: np.ndarray  # [J, F]
    slot_quota: np.ndarray  # [J]
    deadline_margin: int  # steps before a deadline its row plans the job to finish by, where it can
    slot_deadline: np.ndarray  # [J, B-1] deadline-row coefficients of yb encoded now (updated in place)
    deadline_at: np.ndarray  # [J, B-1] their positions in the matrix's data


def structure_key(inputs: PlanInputs) -> str:
    """A digest of what the matrix's shape depends on: job slots, pools, services, blocks and the
    teams with a quota. Which job sits in a slot (its gang, allowed pools, team) is not part of
    it: those coefficients are updated in place (optimizer/slot_updates.py)."""
    h = hashlib.blake2b(digest_size=16)
    parts = (
        inputs.blocks.n_steps,
        np.asarray([inputs.n_jobs, inputs.n_services, inputs.n_pools, inputs.step_s]),
        inputs.svc_allowed,
        inputs.svc_tenants,
        inputs.svc_loss,
        inputs.svc_gpr,
        inputs.svc_startup_s,
    )
    for part in parts:
        h.update(np.ascontiguousarray(part).tobytes())
    h.update("|".join(quota_team_names(inputs)).encode())
    return h.hexdigest()


KEEP_RUNNING_HORIZON_STEPS = 8
"""Later blocks starting within this many steps get a keep-running row per job (2 h)."""


def keep_running_blocks(inputs: PlanInputs) -> int:
    """How many blocks after step 0 carry the keep-running rows."""
    starts = inputs.blocks.first_step[1:]
    return int(np.count_nonzero(starts < KEEP_RUNNING_HORIZON_STEPS))


def quota_team_names(inputs: PlanInputs) -> tuple[str, ...]:
    return tuple(t for t, q in zip(inputs.team_names, inputs.team_quota, strict=True) if np.isfinite(q))


def quota_rows_of_jobs(inputs: PlanInputs, quota_teams: tuple[str, ...]) -> np.ndarray:
    """[J] index of each job's quota row, -1 when its team has no quota."""
    if not inputs.team_names:
        return np.full(inputs.n_jobs, -1, dtype=np.int64)
    index = {t: i for i, t in enumerate(quota_teams)}
    of_team = np.asarray([index.get(t, -1) for t in inputs.team_names], dtype=np.int64)
    return of_team[inputs.job_team] if inputs.n_jobs else np.zeros(0, dtype=np.int64)


def hall_members(job_allowed: np.ndarray, sets: np.ndarray) -> np.ndarray:
    """[J, F] job j counts in set f when its allowed pools lie inside f."""
    inside = ~np.any(job_allowed[:, None, :] & ~sets[None, :, :], axis=2)
    has_pool = np.asarray(job_allowed.any(axis=1), dtype=bool)
    return np.asarray(inside & has_pool[:, None], dtype=bool)


def hall_sets(job_allowed: np.ndarray, job_gang: np.ndarray, n_pools: int) -> np.ndarray:
    """Pool sets with a capacity row in later blocks: each pool, all pools, and the allowed sets
    of jobs holding the most GPUs (up to MAX_HALL_SETS of them)."""
    allowed_count = job_allowed.sum(axis=1)
    several = (allowed_count > 1) & (allowed_count < n_pools)
    rows, job_row = np.unique(job_allowed[several], axis=0, return_inverse=True)
    gpus = np.bincount(job_row.ravel(), weights=job_gang[several], minlength=rows.shape[0])
    weight = {tuple(row): w for row, w in zip(rows.tolist(), gpus.tolist(), strict=True)}
    chosen = sorted(weight, key=lambda k: (-weight[k], k))[:MAX_HALL_SETS]
    sets = [tuple(bool(v) for v in np.eye(n_pools, dtype=bool)[p]) for p in range(n_pools)]
    sets += sorted(chosen, reverse=True)
    if n_pools > 1:
        sets.append(tuple([True] * n_pools))
    return np.asarray(sets, dtype=bool).reshape(-1, n_pools)


class _Rows:
    def __init__(self) -> None:
        self.n = 0
        self.r: list[np.ndarray] = []
        self.c: list[np.ndarray] = []
        self.v: list[np.ndarray] = []
        self.groups: dict[str, np.ndarray] = {}

    def add(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        size = int(np.prod(shape))
        idx = np.arange(self.n, self.n + size, dtype=np.int64).reshape(shape)
        self.n += size
        self.groups[name] = idx
        return idx

    def coef(self, rows: np.ndarray, cols: np.ndarray, vals: np.ndarray | float) -> None:
        rows, cols = np.broadcast_arrays(np.asarray(rows), np.asarray(cols))
        vals = np.broadcast_to(np.asarray(vals, dtype=float), rows.shape)
        self.r.append(rows.ravel())
        self.c.append(cols.ravel())
        self.v.append(vals.ravel())

    def matrix(self, n_cols: int) -> ColumnMatrix:
        if not self.r:
            empty = np.zeros(0, dtype=np.int64)
            return ColumnMatrix.from_triplets(self.n, n_cols, empty, empty, np.zeros(0))
        return ColumnMatrix.from_triplets(
            self.n, n_cols, np.concatenate(self.r), np.concatenate(self.c), np.concatenate(self.v)
        )


class _Columns(NamedTuple):
    """The model's columns, and the index arrays the row groups share."""

    cols: dict[str, np.ndarray]  # column group -> indices shaped by its index sets
    n_cols: int
    y0_pairs: np.ndarray  # [n, 2] (job, pool) of each y0 column
    sp_pairs: np.ndarray  # [m, 2] (service, pool) of each service column row
    shared: np.ndarray  # [m] the pair may time-slice (has G columns)
    g_of: np.ndarray  # [m, B] physical GPUs' column: G where it may time-slice, else R
    g_scale: np.ndarray  # [m, 1] GPUs per unit of that column: 1 for G, gpr for R


def _columns(inputs: PlanInputs) -> _Columns:
    n_jobs, n_svc, n_blocks = inputs.n_jobs, inputs.n_services, inputs.blocks.count
    count = 0
    cols: dict[str, np.ndarray] = {}

    def add(name: str, shape: tuple[int, ...]) -> np.ndarray:
        nonlocal count
        size = int(np.prod(shape))
        cols[name] = np.arange(count, count + size, dtype=np.int64).reshape(shape)
        count += size
        return cols[name]

    # a step-0 column per job slot and allowed pool (a slot's class fixes its allowed pools)
    y0_pairs = np.argwhere(inputs.job_allowed)
    sp_pairs = np.argwhere(inputs.svc_allowed)
    n_sp = sp_pairs.shape[0]
    shared = inputs.svc_tenants[sp_pairs[:, 0], sp_pairs[:, 1]] > 1
    add("y0", (y0_pairs.shape[0],))
    add("yb", (n_jobs, n_blocks - 1))
    add("pre", (n_jobs,))
    r_col = add("R", (n_sp, n_blocks))
    g_col = add("G", (int(np.count_nonzero(shared)), n_blocks))
    add("up0", (n_sp,))
    add("up", (n_svc, n_blocks - 1))
    add("short", (n_svc, n_blocks))
    add("minshort", (n_svc, n_blocks))
    add("up1", (n_sp, move_blocks(inputs) - 1))
    add("move_short", (n_svc, move_blocks(inputs)))
    add("borrow", (len(quota_team_names(inputs)), n_blocks))
    add("late", (n_jobs,))
    # Physical GPUs of each pair: its G column where it may time-slice, else gpr x its R column.
    g_of = np.zeros((n_sp, n_blocks), dtype=np.int64)
    g_of[shared] = g_col
    g_of[~shared] = r_col[~shared]
    g_scale = np.where(shared, 1.0, inputs.svc_gpr[sp_pairs[:, 0]])[:, None]
    return _Columns(cols, count, y0_pairs, sp_pairs, shared, g_of, g_scale)


def _job_rows(rows: _Rows, c: _Columns, inputs: PlanInputs) -> None:
    """Gang in step 0, remaining work, preemption (link, keep-running, bound per step)."""
    n_jobs, dur_s = inputs.n_jobs, inputs.blocks.dur_s
    j0, y0, yb, pre = c.y0_pairs[:, 0], c.cols["y0"], c.cols["yb"], c.cols["pre"]
    # Gang in step 0 (sum over pools <= gang) and remaining work over the horizon.
    rows.coef(rows.add("gang0", (n_jobs,))[j0], y0, 1.0)
    r_work = rows.add("work", (n_jobs,))
    rows.coef(r_work[j0], y0, dur_s[0])
    rows.coef(r_work[:, None], yb, dur_s[None, 1:])
    # Preemption, in GPUs: pre[j] + GPUs kept >= gang for running jobs; at most a bound of
    # preempted gangs per step (pre[j] / gang[j] each).
    r_link = rows.add("preempt_link", (n_jobs,))
    rows.coef(r_link, pre, 1.0)
    rows.coef(r_link[j0], y0, 1.0)
    # A running job stopped in any later block it would still fill pays the same preemption
    # (otherwise deferring the stop by one block would always look free, and never happen).
    # Within the first blocks that suffices: deferring a stop further costs more than it saves.
    n_keep = keep_running_blocks(inputs)
    r_keep = rows.add("keep_running", (n_jobs, n_keep))
    rows.coef(r_keep, pre[:, None], 1.0)
    rows.coef(r_keep, yb[:, :n_keep], 1.0)
    r_pre = rows.add("preempt_bound", (1,))
    rows.coef(np.full(n_jobs, r_pre[0]), pre, 1.0 / np.maximum(inputs.job_gang, 1.0))


def _capacity_rows(rows: _Rows, c: _Columns, inputs: PlanInputs) -> tuple[np.ndarray, np.ndarray]:
    """Pool capacity in step 0, and of each pool set of the Hall family in later blocks: services'
    physical GPUs plus jobs. Returns the sets and which jobs count in each."""
    n_blocks, p_of = inputs.blocks.count, c.sp_pairs[:, 1]
    y0, yb = c.cols["y0"], c.cols["yb"]
    r_cap0 = rows.add("cap0", (inputs.n_pools,))
    rows.coef(r_cap0[c.y0_pairs[:, 1]], y0, 1.0)
    rows.coef(r_cap0[p_of], c.g_of[:, 0], c.g_scale[:, 0])
    sets = hall_sets(inputs.job_allowed, inputs.job_gang, inputs.n_pools)
    r_hall = rows.add("hall", (sets.shape[0], n_blocks - 1))
    members = hall_members(inputs.job_allowed, sets)
    if n_blocks > 1:
        jf = np.argwhere(members)
        rows.coef(r_hall[jf[:, 1]], yb[jf[:, 0]], 1.0)
        sf = np.argwhere(sets[:, p_of])
        rows.coef(r_hall[sf[:, 0]], c.g_of[sf[:, 1], 1:], c.g_scale[sf[:, 1]])
    return sets, members


def _quota_rows(rows: _Rows, c: _Columns, inputs: PlanInputs) -> tuple[tuple[str, ...], np.ndarray]:
    """Team quotas in every block, with lending (optimizer/quota.py): used - borrow <= nominal per
    team, and what all borrow at most the idle quota. Returns the teams with a quota and each job's
    quota row."""
    quota_teams = quota_team_names(inputs)
    r_quota = rows.add("quota", (len(quota_teams), inputs.blocks.count))
    r_lending = rows.add("lending", (1 if quota_teams else 0, inputs.blocks.count))
    slot_quota = quota_rows_of_jobs(inputs, quota_teams)
    if quota_teams:
        borrow = c.cols["borrow"]
        rows.coef(r_quota, borrow, -1.0)
        rows.coef(np.broadcast_to(r_lending, borrow.shape), borrow, 1.0)
        j0, y0, yb = c.y0_pairs[:, 0], c.cols["y0"], c.cols["yb"]
        k0 = slot_quota[j0] >= 0
        rows.coef(r_quota[slot_quota[j0][k0], 0], y0[k0], 1.0)
        kb = np.flatnonzero(slot_quota >= 0)
        rows.coef(r_quota[slot_quota[kb], 1:], yb[kb], 1.0)
    return quota_teams, slot_quota


def _deadline_rows(rows: _Rows, c: _Columns, inputs: PlanInputs, margin: int) -> np.ndarray:
    """Deadlines: GPU-hours before the planned deadline + late >= remaining work (bounds:
    parameters.py). Step 0 always lies before a deadline in reach, so its coefficient never
    moves. Returns the yb coefficients written."""
    r_deadline = rows.add("deadline", (inputs.n_jobs,))
    j0 = c.y0_pairs[:, 0]
    rows.coef(r_deadline[j0], c.cols["y0"], inputs.blocks.dur_s[0] / 3600.0)
    coefficients = deadline_coefficients(inputs, margin)[:, 1:]
    rows.coef(r_deadline[:, None], c.cols["yb"], coefficients)
    rows.coef(r_deadline, c.cols["late"], 1.0)
    return coefficients


def _service_rows(rows: _Rows, c: _Columns, inputs: PlanInputs) -> None:
    """Services: SLO coverage, time-slicing packing, replica bounds, scale-up (lead time, churn)."""
    n_svc, n_blocks, dur_s = inputs.n_services, inputs.blocks.count, inputs.blocks.dur_s
    s_of, p_of, shared, g_of, g_scale = c.sp_pairs[:, 0], c.sp_pairs[:, 1], c.shared, c.g_of, c.g_scale
    r_col, g_col, gpr = c.cols["R"], c.cols["G"], inputs.svc_gpr[s_of]
    loss = inputs.svc_loss[s_of, p_of]
    r_cover = rows.add("cover", (n_svc, n_blocks))
    lead = np.minimum(inputs.svc_startup_s[:, None] / dur_s[None, :], 1.0)  # [S, B]
    rows.coef(r_cover[s_of], g_of, (1.0 + loss)[:, None] * g_scale)
    rows.coef(r_cover[s_of], r_col, (-loss * gpr)[:, None])
    rows.coef(r_cover[s_of, 0], c.cols["up0"], -lead[s_of, 0])
    rows.coef(r_cover[:, 1:], c.cols["up"], -lead[:, 1:])
    rows.coef(r_cover, c.cols["short"], 1.0)
    n_shared = g_col.shape[0]
    r_pack = rows.add("pack", (n_shared, n_blocks))
    rows.coef(r_pack, g_col, inputs.svc_tenants[s_of, p_of][shared, None])
    rows.coef(r_pack, r_col[shared], -gpr[shared, None])
    r_dedic = rows.add("dedicated", (n_shared, n_blocks))
    rows.coef(r_dedic, g_col, 1.0)
    rows.coef(r_dedic, r_col[shared], -gpr[shared, None])
    r_min = rows.add("min_replicas", (n_svc, n_blocks))
    rows.coef(r_min[s_of], r_col, 1.0)
    rows.coef(r_min, c.cols["minshort"], 1.0)
    rows.coef(rows.add("max_replicas", (n_svc, n_blocks))[s_of], r_col, 1.0)
    r_up0 = rows.add("scale_up0", (s_of.size,))
    rows.coef(r_up0, c.cols["up0"], 1.0)
    rows.coef(r_up0, g_of[:, 0], -g_scale[:, 0])
    _kept_rows(rows, c, inputs)
    r_up = rows.add("scale_up", (n_svc, n_blocks - 1))
    rows.coef(r_up, c.cols["up"], 1.0)
    if n_blocks > 1:
        rows.coef(r_up[s_of], g_of[:, 1:], -g_scale)
        rows.coef(r_up[s_of], g_of[:, :-1], g_scale)


def _kept_rows(rows: _Rows, c: _Columns, inputs: PlanInputs) -> None:
    """Replicas kept from one block to the next (its GPUs less those it adds, per pool) carry the
    demand now while the added ones start up, in step 0 and block 1."""
    s_of, g_of, g_scale, n_move = c.sp_pairs[:, 0], c.g_of, c.g_scale, move_blocks(inputs)
    r_kept = rows.add("kept", (inputs.n_services, n_move))
    rows.coef(r_kept[s_of, 0], g_of[:, 0], g_scale[:, 0])
    rows.coef(r_kept[s_of, 0], c.cols["up0"], -1.0)
    rows.coef(r_kept, c.cols["move_short"], 1.0)
    r_up1 = rows.add("scale_up1", (s_of.size, n_move - 1))  # up1 >= G[block 1] - G[step 0]
    if n_move > 1:
        rows.coef(r_kept[s_of, 1], g_of[:, 1], g_scale[:, 0])
        rows.coef(r_kept[s_of, 1], c.cols["up1"][:, 0], -1.0)
        rows.coef(r_up1[:, 0], c.cols["up1"][:, 0], 1.0)
        rows.coef(r_up1[:, 0], g_of[:, 1], -g_scale[:, 0])
        rows.coef(r_up1[:, 0], g_of[:, 0], g_scale[:, 0])


def move_blocks(inputs: PlanInputs) -> int:
    """Blocks whose replicas moved between pools are priced by the start-up gap (``kept`` rows):
    step 0 and block 1. With step 0 alone a move was always cheaper a block later, and a service
    whose pool a pinned job waited for never moved (its margin gave no room to move by)."""
    return min(2, inputs.blocks.count)


def build_structure(inputs: PlanInputs, key: str | None = None, deadline_margin: int = 0) -> ModelStructure:
    """The model's matrix for ``inputs``' structure (see the module's docstring); deadlines in
    reach are planned ``deadline_margin`` steps early where they can be (deadlines.planned_deadline_step)."""
    c = _columns(inputs)
    rows = _Rows()
    _job_rows(rows, c, inputs)
    sets, members = _capacity_rows(rows, c, inputs)
    quota_teams, slot_quota = _quota_rows(rows, c, inputs)
    _service_rows(rows, c, inputs)
    # last, so that a model without deadlines in reach holds its rows in the order it always had
    deadline = _deadline_rows(rows, c, inputs, deadline_margin)
    matrix = rows.matrix(c.n_cols)
    yb = c.cols["yb"]
    deadline_rows = np.broadcast_to(rows.groups["deadline"][:, None], yb.shape)
    return ModelStructure(
        key=key or structure_key(inputs),
        n_cols=c.n_cols,
        n_rows=rows.n,
        matrix=matrix,
        cols=c.cols,
        rows=rows.groups,
        y0_pairs=c.y0_pairs,
        sp_pairs=c.sp_pairs,
        sp_shared=c.shared,
        hall_sets=sets,
        quota_teams=quota_teams,
        slot_gang=inputs.job_gang.copy(),
        slot_hall=members,
        slot_quota=slot_quota,
        deadline_margin=deadline_margin,
        slot_deadline=deadline.copy(),
        deadline_at=matrix.entry_at(deadline_rows.ravel(), yb.ravel()).reshape(yb.shape),
    )

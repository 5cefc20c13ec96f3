"""Step 0 made whole: which running jobs stay, which are preempted, which waiting jobs start.

Running jobs the relaxed plan keeps (share of their gang at least the threshold) stay, and
non-preemptible ones always stay; the preemption bound is honoured by keeping the jobs the plan
least wants out. Waiting jobs start in the order of their relaxed share, then idle GPUs are
backfilled by weight. Every start is checked against the pool's free GPUs, its team's quota and,
where the state reports them, its nodes (optimizer/nodes.py). Pure.
"""

from __future__ import annotations

import math

import numpy as np

from optimizer.inputs import PlanInputs
from optimizer.nodes import NodeBook

EPS = 1e-6


def round_step0(
    inputs: PlanInputs,
    free0: np.ndarray,
    svc_gpus0: np.ndarray,
    share0: np.ndarray,
    share: np.ndarray,
    threshold: float,
    max_preemptions: int,
) -> tuple[np.ndarray, np.ndarray]:
    """(pool [J], -1 when not running in step 0; GPU-seconds left after step 0 [J])."""
    n_jobs = inputs.n_jobs
    gang = inputs.job_gang
    run_pool = inputs.job_running_pool
    pool0 = np.full(n_jobs, -1, dtype=np.int64)
    remaining = inputs.job_remaining_s.copy()
    running = run_pool >= 0
    run_share = np.where(running, share0[np.arange(n_jobs), np.maximum(run_pool, 0)], 0.0)
    pinned = running & ~inputs.job_preemptible
    wants_out = np.flatnonzero(running & ~pinned & (run_share < threshold))
    by_share = wants_out[np.argsort(-run_share[wants_out], kind="stable")]
    keep = running & ((run_share >= threshold) | pinned)
    keep[by_share[: max(wants_out.size - max_preemptions, 0)]] = True

    cap = free0.tolist()
    used = [0.0] * inputs.team_quota.size
    quota = inputs.team_quota.tolist()
    dur0 = float(inputs.blocks.dur_s[0])
    team = inputs.job_team.tolist()
    gangs = gang.tolist()

    def place(j: int, p: int) -> None:
        cap[p] -= gangs[j]
        used[team[j]] += gangs[j]
        pool0[j] = p
        remaining[j] -= gangs[j] * dur0

    # Running jobs: pinned first, then those the plan keeps, by share.
    kept_order = np.flatnonzero(keep)
    kept_order = kept_order[np.lexsort((kept_order, -run_share[kept_order], ~pinned[kept_order]))]
    for j in kept_order.tolist():
        p = int(run_pool[j])
        if pinned[j] or (cap[p] + EPS >= gangs[j] and used[team[j]] + gangs[j] <= quota[team[j]] + EPS):
            place(j, p)

    nodes = NodeBook(list(inputs.pool_free_nodes), list(inputs.pool_gpus_per_node))
    for j in np.flatnonzero(running & (pool0 < 0)).tolist():
        nodes.release(int(run_pool[j]), gangs[j])
    for p in range(inputs.n_pools):
        nodes.reserve_inference(p, math.ceil(float(svc_gpus0[p]) - EPS))

    # A pool whose capacity dips (a maintenance window, a drain) before a job would finish is
    # the last choice for starting it: the window would stop it and its work since checkpoint.
    avail = inputs.avail_steps
    dips = avail < avail[:, :1] - EPS
    dip_step = np.where(dips.any(axis=1), dips.argmax(axis=1), avail.shape[1]).tolist()
    run_steps = np.ceil(inputs.job_remaining_s / np.maximum(gang, 1.0) / inputs.step_s).tolist()

    def try_start(j: int, pools: list[int]) -> bool:
        if used[team[j]] + gangs[j] > quota[team[j]] + EPS:
            return False
        pools = sorted(pools, key=lambda p: dip_step[p] < run_steps[j])  # stable: keeps the order
        for p in pools:
            if cap[p] + EPS >= gangs[j] and nodes.fits(p, gangs[j]):
                nodes.take(p, gangs[j])
                place(j, p)
                return True
        return False

    # Waiting jobs the plan starts now, by relaxed share, then weight.
    waiting = np.flatnonzero(~running & (remaining > 0))
    best = share0[waiting].max(axis=1) if waiting.size and share0.size else np.zeros(waiting.size)
    chosen = waiting[best > EPS]
    chosen = chosen[np.lexsort((chosen, -inputs.job_weight[chosen], -best[best > EPS]))]
    for j in chosen.tolist():
        row = share0[j]
        # the plan's pools first, then any other allowed pool (try_start moves dipping ones last)
        order = np.argsort(-row, kind="stable").tolist()
        try_start(j, [p for p in order if row[p] > EPS or inputs.job_allowed[j, p]])

    # Backfill what rounding left idle: highest weight first, then the jobs the plan wants soonest;
    # best fit (the fullest pool that still takes the gang).
    if max(cap, default=0.0) >= 1.0:
        idle = np.flatnonzero(~running & (pool0 < 0) & (remaining > 0))
        soon = share[idle].sum(axis=1) if share.shape[1] else np.zeros(idle.size)
        for j in idle[np.lexsort((idle, -soon, -inputs.job_weight[idle]))].tolist():
            pools = sorted(np.flatnonzero(inputs.job_allowed[j]).tolist(), key=lambda p: (cap[p], p))
            try_start(j, pools)
    return pool0, remaining

"""Step 0 made whole: which running jobs stay, which are preempted, which waiting jobs start.

Running jobs the relaxed plan keeps (share of their gang at least the threshold) stay, and
non-preemptible ones always stay; the preemption bound is honoured by keeping the jobs the plan
least wants out. Waiting jobs start in the order of their relaxed share, then idle GPUs are
backfilled by weight. Every start is checked against the pool's free GPUs, its team's quota and,
where the state reports them, its nodes (optimizer/nodes.py).

A preemption must make room for something: the relaxed plan knows pools, not nodes, so it may
stop small jobs for a gang that then does not fit on any node. Step 0 is therefore placed twice:
first backfilling only work of a higher weight than the stopped jobs', to see what really uses
the GPUs the preemptions free: preemptions whose GPUs neither the plan's starts, nor inference,
nor higher-weight work use are withdrawn (the job keeps running), and only then is step 0 placed
again with full backfill. Swapping a stopped job for work of the same weight would only lose the
stopped job's work since its checkpoint. Where the state says which nodes hold which running
jobs (``PlanInputs.job_nodes``), a stopped job's GPUs go back on its own nodes, and a gang the plan
starts that fits no node first tries to empty the nodes cheapest to empty (optimizer/node_clearing.py:
jobs of a lower weight, or of any weight without a deadline, each costing its weight times the work
it would lose; worth it only below the gang's weighted wait for the nodes to drain). Failing that it
holds the nodes of its pool that drain first (else the emptiest) against lower-weight backfill, so
they drain for it; the same nodes are held again at the next decisions (the planner hands the holds
back in ``PlanInputs.held_nodes``), as Slurm keeps a reservation, or no node would ever drain. Work
that ends before the held nodes drain may still use them (EASY backfill). Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from optimizer.inputs import PlanInputs
from optimizer.node_clearing import Candidate, cheapest_clearing
from optimizer.nodes import NodeBook, NodeHolds
from optimizer.step0_lists import JobLists, StopCosts

EPS = 1e-6


@dataclass
class _Placement:
    pool0: np.ndarray  # [J] pool in step 0, -1 when not running
    remaining: np.ndarray  # [J] GPU-seconds left after step 0
    cap: list[float]  # per pool: GPUs left
    used: list[float]  # per team: GPUs used
    nodes: NodeBook
    released: dict[int, list[int]]  # stopped running job -> the nodes its GPUs were counted on
    top_weight: dict[tuple[int, int], float]  # (pool, node) -> top weight started there (inf: the plan's)
    holds: NodeHolds  # nodes held for the plan's starts that fit no node

    def result(self) -> tuple[np.ndarray, np.ndarray, NodeHolds]:
        return self.pool0, self.remaining, self.holds


def round_step0(
    inputs: PlanInputs,
    free0: np.ndarray,
    svc_gpus0: np.ndarray,
    share0: np.ndarray,
    share: np.ndarray,
    threshold: float,
    max_preemptions: int,
    preemption_penalty_gpu_s: float = 0.0,
) -> tuple[np.ndarray, np.ndarray, NodeHolds]:
    """(pool [J], -1 when not running in step 0; GPU-seconds left after step 0 [J]; the nodes
    held for blocked gangs, to hold again next time: a hold that moved each decision would
    never let a node drain)."""
    n_jobs = inputs.n_jobs
    run_pool = inputs.job_running_pool
    running = run_pool >= 0
    run_share = np.where(running, share0[np.arange(n_jobs), np.maximum(run_pool, 0)], 0.0)
    pinned = running & ~inputs.job_preemptible
    wants_out = (running & ~pinned & (run_share < threshold)).nonzero()[0]
    keep = running & ((run_share >= threshold) | pinned)
    over_bound = max(wants_out.size - max_preemptions, 0)
    if over_bound:
        # the preemption bound: keep the jobs the plan least wants out
        by_share = wants_out[np.argsort(-run_share[wants_out], kind="stable")]
        keep[by_share[:over_bound]] = True

    stopped = running & ~keep
    n_stopped = int(stopped.sum())
    budget = max(max_preemptions - n_stopped, 0)
    penalty = preemption_penalty_gpu_s
    lists = JobLists.of(inputs)
    if not n_stopped:
        return _place(
            inputs, lists, keep, run_share, pinned, free0, svc_gpus0, share0, share, budget, penalty
        ).result()
    above = float(inputs.job_weight[stopped].min())
    placed = _place(
        inputs,
        lists,
        keep,
        run_share,
        pinned,
        free0,
        svc_gpus0,
        share0,
        share,
        budget,
        penalty,
        backfill_above=above,
    )
    keep = _withdraw_idle_preemptions(inputs, keep, run_share, placed)
    budget = max(max_preemptions - int((running & ~keep).sum()), 0)
    placed = _place(inputs, lists, keep, run_share, pinned, free0, svc_gpus0, share0, share, budget, penalty)
    return placed.result()


def _withdraw_idle_preemptions(
    inputs: PlanInputs, keep: np.ndarray, run_share: np.ndarray, placed: _Placement
) -> np.ndarray:
    """Keep running every stopped job whose GPUs the first placement left to nothing more
    valuable (pool, team and nodes): the jobs the plan least wants out first, then those that
    would lose the most."""
    run_pool = inputs.job_running_pool
    stopped = np.flatnonzero((run_pool >= 0) & ~keep)
    loss = inputs.job_weight * inputs.job_lost_gpu_s
    order = stopped[np.lexsort((stopped, -loss[stopped], -run_share[stopped]))]
    keep = keep.copy()
    cap, used = list(placed.cap), list(placed.used)
    quota = inputs.team_quota.tolist()
    for j in order.tolist():
        p, t, g = int(run_pool[j]), int(inputs.job_team[j]), float(inputs.job_gang[j])
        if (
            cap[p] + EPS >= g
            and used[t] + g <= quota[t] + EPS
            and all(
                placed.top_weight.get((p, node), -math.inf) <= inputs.job_weight[j]
                for node in placed.released.get(j, [])
            )
        ):
            keep[j] = True
            cap[p] -= g
            used[t] += g
    return keep


def _place_kept(
    inputs: PlanInputs,
    lists: JobLists,
    keep: np.ndarray,
    run_share: np.ndarray,
    pinned: np.ndarray,
    cap: list[float],
    used: list[float],
    pool0: np.ndarray,
    remaining: np.ndarray,
    nodes: NodeBook | None,
) -> None:
    """Running jobs stay in their pools: pinned first, then those the plan keeps, by share, while
    the pool's GPUs and the team's quota allow (``cap``, ``used``, ``pool0``, ``remaining`` and
    ``nodes`` updated in place); the book notes which nodes they keep busy and until when (by
    their estimates), where the state says (``nodes`` None: it says nowhere)."""
    kept_order = keep.nonzero()[0]
    # lexsort is stable: jobs equal on both keys stay in index order
    kept_order = kept_order[np.lexsort((-run_share[kept_order], ~pinned[kept_order]))]
    pools, gangs, team, quota = lists.running_pool, lists.gangs, lists.team, lists.quota
    pinned_list = pinned.tolist()
    wall_s = lists.wall_s.tolist() if nodes is not None else []
    placed: list[int] = []
    for j in kept_order.tolist():
        p, g, t = pools[j], gangs[j], team[j]
        if pinned_list[j] or (cap[p] + EPS >= g and used[t] + g <= quota[t] + EPS):
            cap[p] -= g
            used[t] += g
            placed.append(j)
            if nodes is not None:
                nodes.note_running(p, inputs.job_nodes.get(inputs.job_ids[j]), wall_s[j])
    rows = np.array(placed, dtype=np.int64)
    pool0[rows] = inputs.job_running_pool[rows]
    remaining[rows] -= inputs.job_gang[rows] * float(inputs.blocks.dur_s[0])


def _place(
    inputs: PlanInputs,
    lists: JobLists,
    keep: np.ndarray,
    run_share: np.ndarray,
    pinned: np.ndarray,
    free0: np.ndarray,
    svc_gpus0: np.ndarray,
    share0: np.ndarray,
    share: np.ndarray,
    clear_budget: int,
    penalty_gpu_s: float,
    *,
    backfill_above: float = -math.inf,
) -> _Placement:
    """Step 0 placement; backfill starts only jobs weighing more than ``backfill_above``; up to
    ``clear_budget`` more running jobs may be stopped to empty nodes for the plan's gangs (each
    costing its weight times its lost work plus ``penalty_gpu_s`` per GPU)."""
    run_pool = inputs.job_running_pool
    running = run_pool >= 0
    not_running = ~running
    pool0 = np.empty(inputs.n_jobs, dtype=np.int64)
    pool0.fill(-1)
    remaining = inputs.job_remaining_s.copy()
    cap = free0.tolist()
    used = [0.0] * inputs.team_quota.size
    dur0 = float(inputs.blocks.dur_s[0])
    gangs, team, quota = lists.gangs, lists.team, lists.quota
    weights = inputs.job_weight  # read for a few jobs only
    top_weight: dict[tuple[int, int], float] = {}

    def place(j: int, p: int) -> None:
        cap[p] -= gangs[j]
        used[team[j]] += gangs[j]
        pool0[j] = p
        remaining[j] -= gangs[j] * dur0

    # Running jobs: pinned first, then those the plan keeps, by share; the book notes which
    # nodes they keep busy and until when (by their estimates), where the state says.
    nodes = NodeBook(list(inputs.pool_free_nodes), list(inputs.pool_gpus_per_node))
    node_detail = inputs.pool_free_nodes.count(None) < len(inputs.pool_free_nodes)  # some pool says
    job_nodes = inputs.job_nodes
    _place_kept(
        inputs, lists, keep, run_share, pinned, cap, used, pool0, remaining, nodes if node_detail else None
    )

    # A stopped gang's GPUs go back on its nodes (where unknown, they count as nodes of their
    # own), so whether a start used them is known; then inference is packed on the fullest nodes,
    # as the cluster does (pool totals still bound inference plus jobs).
    released = {
        j: nodes.release(int(run_pool[j]), gangs[j], job_nodes.get(inputs.job_ids[j]))
        for j in (running & (pool0 < 0)).nonzero()[0].tolist()
    }
    if node_detail:  # (a pool without node detail reserves nothing)
        for p, gpus in enumerate(svc_gpus0.tolist()):
            nodes.reserve_inference(p, math.ceil(gpus - EPS))

    # A pool whose capacity dips (a maintenance window, a drain) before a job would finish is
    # the last choice for starting it: the window would stop it and its work since checkpoint.
    # (argmax is 0 only for a pool that never dips: step 0 cannot dip below itself)
    dips = inputs.avail_steps < inputs.avail_steps[:, :1] - EPS
    dip_step = [step or dips.shape[1] for step in dips.argmax(axis=1).tolist()]
    first_dip, last_dip = min(dip_step, default=0), max(dip_step, default=0)

    def try_start(j: int, pools: list[int], rank: float) -> bool:
        """Start j in the first pool that takes it; ``rank``: the weight it counts with on its nodes
        (held nodes take it only if it ends before they drain)."""
        if used[team[j]] + gangs[j] > quota[team[j]] + EPS:
            return False
        run_steps, start_s = float(lists.run_steps[j]), float(lists.start_s[j])
        if first_dip < run_steps <= last_dip:  # else no pool dips before j ends, or all do
            pools = sorted(pools, key=lambda p: dip_step[p] < run_steps)  # stable: keeps the order
        for p in pools:
            if cap[p] + EPS < gangs[j]:
                continue
            if nodes.free[p] is not None:  # node detail: the book finds the nodes and notes them
                if not nodes.fits(p, gangs[j], rank, start_s):
                    continue
                for node in nodes.take(p, gangs[j], rank, start_s):
                    key = (p, node)
                    top_weight[key] = max(top_weight.get(key, -math.inf), rank)
            place(j, p)
            return True
        return False

    costs: list[StopCosts] = []  # worked out at the first clearing only

    def clear_for(j: int, p: int) -> bool:
        """Stop the cheapest lower-weight jobs whose nodes then take gang j (see node_clearing)."""
        nonlocal clear_budget
        job_free = nodes.job_free[p]
        if (
            job_free is None
            or clear_budget <= 0
            or cap[p] + EPS < gangs[j]
            or used[team[j]] + gangs[j] > quota[team[j]] + EPS
        ):
            return False
        if not costs:
            costs.append(StopCosts.of(inputs, running & inputs.job_preemptible & ~pinned, penalty_gpu_s))
        lost, stoppable, horizon_s, no_deadline = costs[0]
        weight = weights.tolist()
        candidates = [
            Candidate(v, job_nodes[inputs.job_ids[v]], weight[v] * lost[v])
            for v in np.flatnonzero(stoppable & (pool0 == p)).tolist()
            if inputs.job_ids[v] in job_nodes and (weight[v] < weight[j] or no_deadline[v])
        ]
        per_node = inputs.pool_gpus_per_node[p]
        count = max(-(-int(gangs[j]) // per_node), 1)
        # how long the gang would wait for nodes to drain by themselves (unknown: the horizon)
        drains = sorted(nodes.drain_s[p].get(i, 0.0) for i in range(len(job_free)))
        known = not nodes.unknown[p] and len(drains) >= count
        wait_s = min(drains[count - 1], horizon_s) if known else horizon_s
        chosen = cheapest_clearing(
            job_free,
            nodes.inference_gpus[p],
            per_node,
            int(gangs[j]),
            candidates,
            budget_jobs=clear_budget,
            max_cost=weight[j] * gangs[j] * wait_s,
        )
        if chosen is None:
            return False
        job_free = list(job_free)
        for c in chosen:
            v = c.job
            pool0[v] = -1
            cap[p] += gangs[v]
            used[team[v]] -= gangs[v]
            remaining[v] += gangs[v] * dur0
            for node, gpus in c.on_nodes.items():
                job_free[node] = min(job_free[node] + gpus, per_node)
        nodes.repack(p, job_free)
        clear_budget -= len(chosen)
        return True

    # Waiting jobs the plan starts now, by relaxed share, then weight.
    waiting = (not_running & (remaining > 0)).nonzero()[0]
    best = share0[waiting].max(axis=1) if waiting.size and share0.size else np.zeros(waiting.size)
    wanted = best > EPS
    chosen = waiting[wanted]
    # lexsort is stable: jobs equal on both keys stay in index order
    chosen = chosen[np.lexsort((-inputs.job_weight[chosen], -best[wanted]))]
    held_before = inputs.held_nodes or {}
    holds: NodeHolds = {}
    chosen_share0 = share0[chosen]
    # each job's pools by its share, highest first (stable: ties in pool order), all at once
    pool_orders = np.argsort(-chosen_share0, axis=1, kind="stable").tolist()
    for j, row, allowed, order in zip(
        chosen.tolist(),
        chosen_share0.tolist(),
        inputs.job_allowed[chosen].tolist(),
        pool_orders,
        strict=True,
    ):
        # the plan's pools first, then any other allowed pool (try_start moves dipping ones last)
        pools = [p for p in order if row[p] > EPS or allowed[p]]
        # the plan's own starts outrank any stop; one that fits no node holds the emptiest nodes
        # of its pool against lower-weight backfill (a reservation per blocked gang)
        if not try_start(j, pools, math.inf) and pools:
            p = pools[0]
            if clear_for(j, p) and try_start(j, [p], math.inf):
                continue
            before = held_before.get(inputs.job_ids[j])
            prefer = before[1] if before is not None and before[0] == p else ()
            real = len(inputs.pool_free_nodes[p] or ())
            holds[inputs.job_ids[j]] = (p, nodes.hold(p, gangs[j], float(weights[j]), prefer, real))

    # Backfill what rounding left idle: highest weight first, then the jobs the plan wants soonest;
    # best fit (the fullest pool that still takes the gang).
    if max(cap, default=0.0) >= 1.0:
        idle_now = not_running & (pool0 < 0) & (remaining > 0)
        idle = (idle_now & (inputs.job_weight > backfill_above)).nonzero()[0]
        soon = share[idle].sum(axis=1) if share.shape[1] else np.zeros(idle.size)
        # lexsort is stable: jobs equal on both keys stay in index order
        for j in idle[np.lexsort((-soon, -inputs.job_weight[idle]))].tolist():
            allowed = inputs.job_allowed[j].tolist()
            pools = sorted((p for p, ok in enumerate(allowed) if ok), key=lambda p: (cap[p], p))
            try_start(j, pools, float(weights[j]))
    return _Placement(pool0, remaining, cap, used, nodes, released, top_weight, holds)

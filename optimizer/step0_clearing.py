"""Node clearing in step 0 (called from optimizer/step0.py): a gang the plan starts that fits no
node first tries to empty the nodes cheapest to empty, stopping lower-weight checkpointing jobs
past their minimum run (optimizer/node_clearing.py chooses them), where the stops pay for
themselves against the gang's wait for the nodes to drain by themselves (optimizer/stop_pays.py's
``clearing_pays``). Nodes that go out for maintenance before the gang would end are not cleared for
it. Pure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from optimizer.node_clearing import Candidate, cheapest_clearing
from optimizer.nodes import without
from optimizer.step0_kept import EPS, Plan0
from optimizer.stop_pays import clearing_pays, stop_cost_gpu_s

if TYPE_CHECKING:  # annotations only: optimizer/step0.py imports this module
    from optimizer.step0 import _Step0


def clear_for(step0: _Step0, j: int, p: int, plan: Plan0) -> bool:
    """Stop the cheapest lower-weight jobs whose nodes then take gang j, if the stops pay for
    themselves (see node_clearing). Where the pool lacks GPUs for it, not only whole nodes,
    only a gang of several nodes clears: the relaxed plan may start such a gang on a part of
    its GPUs, which no rounding can run and which waits for the slowest of its nodes to drain
    (gang-failures at seed 11: a weight-3 64-GPU gang waited 7.3 h, PWT 0.963 -> 0.997 of
    kueue-hpa's with this); a gang within one node waits for GPUs to free as any job does."""
    job_free = step0.nodes.job_free[p]
    g = step0.gang(j)
    per_node = step0.inputs.pool_gpus_per_node[p]
    if job_free is None or step0.clear_budget <= 0:
        return False
    if step0.cap[p] + EPS < g and g <= per_node:  # short of GPUs, and a gang within one node
        return False
    wait_s = _drain_wait_s(step0, j, p)
    # nodes that go out for maintenance before the gang would end are not cleared for it
    going = step0.nodes.going(p, step0.inputs.exposed_s(j))
    candidates = [c for c in _clearing_candidates(step0, j, p, plan) if not going & set(c.on_nodes)]
    chosen = cheapest_clearing(
        without(job_free, going),
        step0.nodes.inference_gpus[p],
        per_node,
        int(g),
        candidates,
        budget_jobs=step0.clear_budget,
    )
    if chosen is None or step0.cap[p] + sum(step0.gang(c.job) for c in chosen) + EPS < g:
        return False
    if not clearing_pays(step0.inputs, j, [c.job for c in chosen], wait_s, step0.rules):
        return False
    job_free = list(job_free)
    for c in chosen:
        step0.count(c.job, p, sign=-1.0)
        step0.outcome.cleared_for[c.job] = j
        for node, gpus in c.on_nodes.items():
            job_free[node] = min(job_free[node] + gpus, per_node)
    step0.nodes.repack(p, job_free)
    step0.clear_budget -= len(chosen)
    return True


def _drain_wait_s(step0: _Step0, j: int, p: int) -> float:
    """How long gang j would wait for pool p's nodes to drain by themselves (unknown: the horizon)."""
    inputs, nodes = step0.inputs, step0.nodes
    horizon_s = inputs.blocks.horizon_s
    count = max(-(-int(step0.gang(j)) // inputs.pool_gpus_per_node[p]), 1)
    drains = sorted(nodes.drain_s[p].get(i, 0.0) for i in range(len(nodes.job_free[p] or ())))
    if nodes.unknown[p] or len(drains) < count:
        return horizon_s
    return min(drains[count - 1], horizon_s)


def _clearing_candidates(step0: _Step0, j: int, p: int, plan: Plan0) -> list[Candidate]:
    """Running jobs in pool p that may be stopped for job j: preemptible, checkpointing, past
    their minimum run, on known nodes, and of a lower weight (never work of equal or higher
    value for a gang); each costs its weight x (lost work + the preemption penalty). A job
    that cannot checkpoint would lose all its work for a gain that rests on
    estimated drain times: the gang waits for the nodes instead."""
    inputs = step0.inputs
    weight = inputs.job_weight
    running_here = (inputs.job_running_pool >= 0) & (step0.pool0 == p)
    stoppable = (
        running_here
        & inputs.job_preemptible
        & np.isfinite(inputs.job_checkpoint_s)
        & ~plan.pinned
        & ~plan.fresh
    )
    cost = stop_cost_gpu_s(inputs, step0.rules)
    return [
        Candidate(v, inputs.job_nodes[inputs.job_ids[v]], float(cost[v]))
        for v in np.flatnonzero(stoppable).tolist()
        if inputs.job_ids[v] in inputs.job_nodes and weight[v] < weight[j]
    ]

"""Step 0, node level: which running jobs to stop so a gang the plan starts finds whole nodes.

The relaxed plan counts GPUs per pool, so a gang it starts may find the pool's free GPUs spread
over partly used nodes, or a gang of several nodes may get a part of the GPUs it needs, which no
rounding can run (optimizer/step0.py's ``clear_for``). Where the state says which nodes hold which
running jobs, the nodes that are cheapest to empty are chosen: each candidate job (preemptible,
checkpointing, past its minimum run, of a lower weight than the gang) costs its weight times the
work it would lose (since its checkpoint, plus its restart and the preemption penalty;
optimizer/step0.py). Nodes are emptied cheapest first until the gang fits, inference packed anew on
what is left as the cluster does. Whether those stops are worth it is judged as any stop is
(optimizer/stop_pays.py's ``clearing_pays``: the value of the gang's work done sooner than its wait
for the nodes to drain by themselves, against the work the stops lose). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from optimizer.nodes import place_gang, reserve_packed


@dataclass(frozen=True)
class Candidate:
    """A running job that may be stopped: the GPUs it holds per node and what stopping it costs."""

    job: int
    on_nodes: dict[int, int]
    cost: float


def cheapest_clearing(
    job_free: list[int],
    inference_gpus: int,
    gpus_per_node: int,
    gang: int,
    candidates: list[Candidate],
    *,
    budget_jobs: int,
) -> list[Candidate] | None:
    """The cheapest set of candidates (nodes emptied cheapest first) whose stop lets ``gang`` fit
    on ``job_free`` with ``inference_gpus`` packed on the fullest nodes; None if no set within
    ``budget_jobs`` jobs does."""
    if budget_jobs <= 0:
        return None
    by_node: dict[int, list[Candidate]] = {}
    for c in candidates:
        for i in c.on_nodes:
            if 0 <= i < len(job_free):
                by_node.setdefault(i, []).append(c)
    # a node can be emptied if its candidates hold all of its busy GPUs
    emptiable = [
        i for i, cs in by_node.items() if job_free[i] + sum(c.on_nodes[i] for c in cs) >= gpus_per_node
    ]
    emptiable.sort(key=lambda i: (sum(c.cost for c in by_node[i]), -job_free[i], i))
    chosen: dict[int, Candidate] = {}
    for i in emptiable:
        for c in by_node[i]:
            chosen.setdefault(c.job, c)
        if len(chosen) > budget_jobs:
            return None
        trial = list(job_free)
        for c in chosen.values():
            for node, gpus in c.on_nodes.items():
                trial[node] = min(trial[node] + gpus, gpus_per_node)
        if place_gang(reserve_packed(trial, inference_gpus), gang, gpus_per_node) is not None:
            return list(chosen.values())
    return None

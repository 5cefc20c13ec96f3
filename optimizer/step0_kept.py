"""Which running jobs step 0 keeps (part of rounding step 0, optimizer/step0.py): those the
relaxed plan keeps (share of their gang at least the threshold), the non-preemptible ones, those
whose stop would not pay for itself (optimizer/stop_pays.py), and more where stopping all the
others would break the preemption bound; after a first placement, those whose GPUs it left to
nothing more valuable (``withdraw_idle_preemptions``). Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from optimizer.inputs import PlanInputs
from optimizer.quota import fits_cohort
from optimizer.step0_outcome import Step0Outcome
from optimizer.stop_pays import StopRules, judge_stops

EPS = 1e-6


class FirstPlacement(Protocol):
    """What withdraw_idle_preemptions reads of step 0's first placement (optimizer/step0.py)."""

    pool0: np.ndarray  # [J] pool in step 0, -1 when not running
    cap: list[float]  # per pool: GPUs left
    used: list[float]  # per team: GPUs used
    released: dict[int, list[int]]  # stopped job -> nodes its GPUs were on
    top_weight: dict[tuple[int, int], float]  # (pool, node) -> top weight started
    outcome: Step0Outcome


@dataclass(frozen=True)
class Plan0:
    """What step 0 is placed from: the relaxed plan's shares and who it keeps running."""

    share0: np.ndarray  # [J, P] relaxed share of each job's gang in each pool in step 0
    share: np.ndarray  # [J, B] relaxed share per block
    keep: np.ndarray  # [J] running jobs kept running
    run_share: np.ndarray  # [J] share of a running job in its own pool
    pinned: np.ndarray  # [J] running and not preemptible
    fresh: np.ndarray  # [J] running for less than the minimum run: never stopped for other jobs
    by_bound: frozenset[int] = frozenset()  # running jobs kept only by the preemption bound
    awaiting_checkpoint: frozenset[int] = frozenset()  # kept: the stop waits for a checkpoint in the step


def kept_by_plan(
    inputs: PlanInputs,
    share0: np.ndarray,
    share: np.ndarray,
    threshold: float,
    max_preemptions: int,
    free0: np.ndarray,
    rules: StopRules,
) -> Plan0:
    """Running jobs the relaxed plan keeps (share at least ``threshold``, or not preemptible),
    those whose stop would not pay for itself (optimizer/stop_pays.py), and more of them where
    stopping all the others would break the preemption bound."""
    run_pool = inputs.job_running_pool
    running = run_pool >= 0
    run_share = np.where(running, share0[np.arange(inputs.n_jobs), np.maximum(run_pool, 0)], 0.0)
    pinned = running & ~inputs.job_preemptible
    wants_out = (running & ~pinned & (run_share < threshold)).nonzero()[0]
    keep = running & ((run_share >= threshold) | pinned)
    judged = judge_stops(inputs, share0, wants_out, free0, rules)
    unpaid = judged.kept
    keep[unpaid] = True
    wants_out = np.setdiff1d(wants_out, unpaid)
    over_bound = max(wants_out.size - max_preemptions, 0)
    by_bound: frozenset[int] = frozenset()
    if over_bound:
        # the preemption bound: keep the jobs the plan least wants out
        by_share = wants_out[np.argsort(-run_share[wants_out], kind="stable")]
        keep[by_share[:over_bound]] = True
        by_bound = frozenset(by_share[:over_bound].tolist())
    fresh = running & (inputs.job_ran_s < rules.min_run_s)
    return Plan0(share0, share, keep, run_share, pinned, fresh, by_bound, judged.awaiting_checkpoint)


def withdraw_idle_preemptions(
    inputs: PlanInputs, keep: np.ndarray, run_share: np.ndarray, placed: FirstPlacement
) -> np.ndarray:
    """Keep running every stopped job whose GPUs the first placement left to nothing more
    valuable (pool, team and nodes): the jobs the plan least wants out first, then those that
    would lose the most. GPUs the first placement backfilled with work no heavier than the stopped
    job count as left to nothing more valuable (that backfill then finds no room): the first
    placement backfills above the lightest stopped job's weight, so without this a heavier stopped
    job's GPUs went to a job of its own weight (mass-arrivals, seed 11: a weight-4 job stopped, its
    GPU backfilled by another weight-4 job in the same step)."""
    run_pool = inputs.job_running_pool
    stopped = np.flatnonzero((run_pool >= 0) & ~keep)
    loss = inputs.job_weight * inputs.job_lost_gpu_s
    order = stopped[np.lexsort((stopped, -loss[stopped], -run_share[stopped]))]
    keep = keep.copy()
    cap, used = list(placed.cap), list(placed.used)
    quota = inputs.team_quota.tolist()
    backfill = sorted(placed.outcome.backfilled, key=lambda b: (inputs.job_weight[b], b))  # lightest first
    for j in order.tolist():
        p, t, g = int(run_pool[j]), int(inputs.job_team[j]), float(inputs.job_gang[j])
        weight = float(inputs.job_weight[j])
        released = placed.released.get(j, [])
        if not all(placed.top_weight.get((p, node), -math.inf) <= weight for node in released):
            continue  # a heavier job took its nodes
        give_way = _lighter_backfill(inputs, backfill, placed.pool0, p, weight, g - cap[p])
        cap_then, used_then = cap[p], list(used)
        for b in give_way:
            cap_then += float(inputs.job_gang[b])
            used_then[int(inputs.job_team[b])] -= float(inputs.job_gang[b])
        if cap_then + EPS >= g and fits_cohort(used_then, quota, t, g):
            keep[j] = True
            cap[p], used = cap_then - g, used_then
            used[t] += g
            backfill = [b for b in backfill if b not in give_way]
    return keep


def _lighter_backfill(
    inputs: PlanInputs, backfill: list[int], pool0: np.ndarray, p: int, weight: float, short: float
) -> list[int]:
    """Backfilled jobs in pool p of at most ``weight``, lightest first, whose GPUs cover ``short``
    (none when there is no shortfall, or they cannot cover it)."""
    if short <= EPS:
        return []
    chosen: list[int] = []
    for b in backfill:
        if pool0[b] == p and inputs.job_weight[b] <= weight:
            chosen.append(b)
            short -= float(inputs.job_gang[b])
            if short <= EPS:
                return chosen
    return []

"""From relaxed shares to a plan that can run: whole replicas, whole gangs, every step feasible.

The LP gives fractional replicas and fractional gang shares; this module turns them (or the
fallback's heuristic scores, which take the same path) into integer replicas per service and
pool, and one pool or none per job and block, respecting pool capacity, gang sizes, allowed pools,
quotas, remaining work, non-preemptible jobs and the preemption bound. Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple, TypeVar

import numpy as np

from optimizer.inputs import PlanInputs
from optimizer.nodes import NodeHolds
from optimizer.quota import fits_quota
from optimizer.step0 import round_step0
from optimizer.step0_outcome import Step0Outcome
from optimizer.stop_pays import StopRules

EPS = 1e-6
_T = TypeVar("_T")


@dataclass(frozen=True)
class RoundedPlan:
    svc_replicas: np.ndarray  # [S, P, B] int
    svc_gpus: np.ndarray  # [S, P, B] physical GPUs
    job_pool: np.ndarray  # [J, B] pool index, -1 when not running
    job_share0: np.ndarray  # [J, P] relaxed share of the gang in step 0 (reasons)
    job_share: np.ndarray  # [J, B] relaxed share of the gang per block (reasons)
    preempted: np.ndarray  # [J] bool: running now, not running in step 0
    holds: NodeHolds = field(default_factory=dict)  # nodes held for blocked gangs (next decision)
    outcome: Step0Outcome = field(default_factory=Step0Outcome)  # what step 0's placement saw (reasons)


def round_services(
    inputs: PlanInputs,
    replicas: np.ndarray,
    gpus: np.ndarray,
    reserved: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Whole replicas (rounded up where the pool has room), GPUs within packing limits.

    ``reserved`` [P, B]: GPUs of jobs the plan keeps; a replica is rounded up only into room
    that is left beside them (a sliver of lead-time capacity never evicts a whole gang), but the
    relaxed plan's whole replicas never give way to them: there the jobs give way, in step 0's
    placement (tests/optimizer/test_service_rounding.py; cutting the services instead put one under
    its min_replicas on a holdout workload, and the fallback that followed stopped a 64-GPU gang). A
    latency-critical service's GPUs are whole in every block: a fraction would be time-sliced with
    other services' replicas, beyond the ``max_cotenants`` the model's packing rows hold its own
    replicas to (a whole GPU holds only its own, at most that many).
    """
    room = inputs.avail_blocks() - (0.0 if reserved is None else reserved)
    gpr = inputs.svc_gpr[:, None, None]
    tenants = inputs.svc_tenants[:, :, None]
    whole = np.ceil(np.maximum(replicas, 0.0) - EPS)
    np.minimum(whole, inputs.svc_max[:, None, None], out=whole)
    dedicated = gpr * whole  # GPUs of the whole replicas, none shared
    critical = inputs.svc_latency_critical[:, None, None]
    phys = _whole_where(critical, gpus.clip(dedicated / tenants, dedicated), dedicated / tenants)
    # Beside the kept jobs only the rounding up gives way (never below the relaxed plan's whole
    # replicas: there the kept jobs give way, in step 0's placement); beyond the pool's GPUs, any.
    floor = np.floor(np.maximum(replicas, 0.0) + EPS)
    _round_down(inputs, whole, phys, replicas, gpus, phys.sum(axis=0) - room, floor)
    over = phys.sum(axis=0) - inputs.avail_blocks()
    _round_down(inputs, whole, phys, replicas, gpus, over, np.zeros_like(floor))
    return whole.astype(np.int64), phys


def _round_down(
    inputs: PlanInputs,
    whole: np.ndarray,
    phys: np.ndarray,
    replicas: np.ndarray,
    gpus: np.ndarray,
    over: np.ndarray,
    lowest: np.ndarray,
) -> None:
    """Round down the most fractional replicas of each pool and block that is ``over`` [P, B] its
    room, each service to no fewer than ``lowest`` [S, P, B] replicas (in place)."""
    gpr = inputs.svc_gpr[:, None, None]
    tenants = inputs.svc_tenants[:, :, None]
    critical = inputs.svc_latency_critical[:, None, None]
    for p, b in zip(*(over > EPS).nonzero(), strict=True):
        order = np.argsort(-(whole[:, p, b] - replicas[:, p, b]))
        for s in order:
            if over[p, b] <= EPS:
                break
            while whole[s, p, b] > lowest[s, p, b] and over[p, b] > EPS:
                whole[s, p, b] -= 1
                new_phys = min(
                    max(gpus[s, p, b], gpr[s, 0, 0] * whole[s, p, b] / tenants[s, p, 0]),
                    gpr[s, 0, 0] * whole[s, p, b],
                )
                if critical[s, 0, 0]:
                    new_phys = max(
                        math.floor(new_phys + 0.5),
                        math.ceil(gpr[s, 0, 0] * whole[s, p, b] / tenants[s, p, 0] - EPS),
                    )
                over[p, b] -= phys[s, p, b] - new_phys
                phys[s, p, b] = new_phys


def _whole_where(critical: np.ndarray, phys: np.ndarray, densest: np.ndarray) -> np.ndarray:
    """``phys`` rounded to the nearest whole GPU where ``critical``, never below the whole GPUs
    its replicas need at their densest (``densest``: gpr x replicas / tenants) nor above dedicated
    (gpr is whole)."""
    whole = np.maximum(np.floor(phys + 0.5), np.ceil(densest - EPS))
    rounded: np.ndarray = np.where(critical, whole, phys)
    return rounded


def round_jobs(
    inputs: PlanInputs,
    free: np.ndarray,
    share0: np.ndarray,
    share: np.ndarray,
    threshold: float,
    max_preemptions: int,
    svc_gpus0: np.ndarray | None = None,
    preemption_penalty_gpu_s: float = 0.0,
    rules: StopRules | None = None,
) -> tuple[np.ndarray, np.ndarray, NodeHolds, Step0Outcome]:
    """One pool or none per job and block. ``free`` [P, B]: GPUs left after services;
    ``svc_gpus0`` [P]: inference GPUs in step 0 (for the node-level fit).

    Step 0 order: non-preemptible running jobs, running jobs the plan keeps, then by relaxed
    share (highest first) and weight. Later blocks: jobs keep their pool when it still fits.
    """
    n_jobs, n_blocks = inputs.n_jobs, inputs.blocks.count
    run_pool = inputs.job_running_pool
    job_pool = np.empty((n_jobs, n_blocks), dtype=np.int64)
    job_pool.fill(-1)
    if svc_gpus0 is None:
        svc_gpus0 = np.zeros(inputs.n_pools)

    # Step 0: whole gangs, node fit, preemption bound, backfill.
    running = run_pool >= 0
    job_pool[:, 0], remaining, holds, outcome = round_step0(
        inputs,
        free[:, 0],
        svc_gpus0,
        share0,
        share,
        threshold,
        max_preemptions,
        preemption_penalty_gpu_s,
        rules,
    )
    preempted = running & (job_pool[:, 0] < 0)

    _round_later_blocks(inputs, free, share, job_pool, remaining)
    return job_pool, preempted, holds, outcome


def _later_block_order(inputs: PlanInputs, share: np.ndarray, first: int) -> list[list[int]]:
    """Per block from ``first`` on, the jobs with a share there, by share (highest first), weight
    (highest first), then index: one sort over every (block, job) pair at once."""
    later = share[:, first:]
    on_b, on_j = np.nonzero(later.T > EPS)  # block-major
    weight = inputs.job_weight
    ranked = on_j[np.lexsort((on_j, -weight[on_j], -later[on_j, on_b], on_b))].tolist()
    return split_by_block(ranked, on_b, later.shape[1])


def split_by_block(items: list[_T], block_of: np.ndarray, n_blocks: int) -> list[list[_T]]:
    """Block-major ``items`` (``block_of`` each, ascending) as one list per block."""
    lists: list[list[_T]] = []
    start = 0
    for count in np.bincount(block_of, minlength=n_blocks).tolist():
        lists.append(items[start : start + count])
        start += count
    return lists


def _round_later_blocks(
    inputs: PlanInputs,
    free: np.ndarray,
    share: np.ndarray,
    job_pool: np.ndarray,
    remaining: np.ndarray,
) -> None:
    """Blocks 1..B-1 of ``job_pool`` (filled in place; column 0 is step 0's), block by block
    (see ``_round_block``); quotas and remaining work bound every block."""
    n_blocks = job_pool.shape[1]
    if n_blocks <= 1:
        return
    jobs = _JobLimits(
        gang=inputs.job_gang.tolist(),
        team=inputs.job_team.tolist(),
        quota=inputs.team_quota.tolist(),
        allowed=[[q for q, ok in enumerate(row) if ok] for row in inputs.job_allowed.tolist()],
        idle=inputs.quota_idle,
    )
    left = remaining.tolist()
    durations, free_by_block = inputs.blocks.dur_s.tolist(), free.T.tolist()
    columns: list[list[int]] = [job_pool[:, 0].tolist()]
    for b, ranked in enumerate(_later_block_order(inputs, share, 1), start=1):
        columns.append(_round_block(jobs, durations[b], ranked, free_by_block[b], columns[-1], left))
    job_pool[:, 1:] = np.asarray(columns[1:], dtype=np.int64).T


class _JobLimits(NamedTuple):
    """Per job: its gang, team and allowed pools; per team: its quota; the idle quota lent."""

    gang: list[float]
    team: list[int]
    quota: list[float]
    allowed: list[list[int]]
    idle: float


def _round_block(
    jobs: _JobLimits, dur: float, ranked: list[int], cap: list[float], prev: list[int], left: list[float]
) -> list[int]:
    """A later block's pool per job (``dur``: its length): jobs running in the block before keep
    their pool when it still fits (``cap``: GPUs free per pool), then the rest, in ``ranked``
    order, go to the allowed pool with most room. ``left`` (work left per job) is updated in place."""
    gang, team, quota, allowed, idle = jobs
    used = [0.0] * len(quota)
    placed = [-1] * len(prev)
    # running in the previous block first (stable: keeps the ranked order within each part)
    for j in [j for j in ranked if prev[j] >= 0] + [j for j in ranked if prev[j] < 0]:
        g, t = gang[j], team[j]
        if left[j] <= 0 or not fits_quota(used, quota, idle, t, g):
            continue
        p = prev[j]
        if p < 0 or cap[p] + EPS < g:
            fits = [q for q in allowed[j] if cap[q] + EPS >= g]
            if not fits:
                continue
            p = max(fits, key=lambda q: cap[q])  # the first of equals, as a strict > scan
        cap[p] -= g
        used[t] += g
        placed[j] = p
        left[j] -= g * dur
    return placed


def services_free(inputs: PlanInputs, svc_gpus: np.ndarray) -> np.ndarray:
    """[P, B] GPUs left for jobs: whole GPUs only (a gang cannot use a fraction)."""
    used: np.ndarray | float = 0.0
    if svc_gpus.size:
        used = np.ceil(svc_gpus.sum(axis=0) - EPS)
    return np.maximum(np.floor(inputs.avail_blocks() + EPS) - used, 0.0)


def greedy_service_targets(
    inputs: PlanInputs, prefer: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Replicas that cover each block's demand at the SLO quantile on dedicated GPUs, placed in
    the service's current pools first, then the allowed pool with most room; every service's
    min_replicas is placed before any demand above it."""
    n_svc, n_pools, n_blocks = inputs.n_services, inputs.n_pools, inputs.blocks.count
    replicas = np.zeros((n_svc, n_pools, n_blocks))
    demand = inputs.demand_blocks()
    room = np.floor(inputs.avail_blocks() + EPS)
    pinned = (inputs.job_running_pool >= 0) & ~inputs.job_preemptible
    if pinned.any():
        held = np.bincount(
            inputs.job_running_pool[pinned], weights=inputs.job_gang[pinned], minlength=n_pools
        )
        room = np.maximum(room - held[:, None], 0.0)
    base = inputs.svc_replicas_now if prefer is None else prefer
    # Every service's minimum first, then the demand above it: an earlier service's demand
    # never takes the GPUs a later service's min_replicas needs.
    for first in (True, False):
        for s in range(n_svc):
            gpr = inputs.svc_gpr[s]
            pools = np.flatnonzero(inputs.svc_allowed[s])
            for b in range(n_blocks):
                need = max(math.ceil(demand[s, b] / gpr - EPS), int(inputs.svc_min[s]))
                need = min(need, int(inputs.svc_max[s]), int(inputs.svc_min[s]) if first else need)
                need -= int(replicas[s, :, b].sum())
                order = pools[np.lexsort((-room[pools, b], -base[s, pools]))]
                for p in order:
                    if need <= 0:
                        break
                    take = min(need, int(room[p, b] // gpr))
                    replicas[s, p, b] += take
                    room[p, b] -= take * gpr
                    need -= take
    return replicas, replicas * inputs.svc_gpr[:, None, None]

"""Team quotas with lending, as Kueue lends unused quota within a cohort; used by the inputs, the
horizon model's rows, step 0, the rounding of later blocks and the reasons.

A team's idle quota is its nominal quota less the GPUs its queued and running jobs want. Any team
that wants more than its own quota may borrow idle quota, and what all teams borrow together
(each team's GPUs beyond its nominal quota) is at most the idle quota of all: what is lent is lent
once, and the GPUs an owner's own work wants are never lent anew. Running borrowers stay while all
teams together hold no more than their quotas (``fits_cohort``, as Kueue keeps admitted work); an
owner's start within its own quota takes lent quota back in step 0 by stopping the borrowers that
lose least, no more than it needs (``cheapest_reclaim``), when that pays against waiting for them
to end (``reclaim_pays``), whatever the weights. In the model: a ``borrow[t, b]`` column per team
with a quota, the team's row ``used - borrow <= nominal`` and one ``lending`` row per block
``sum(borrow) <= idle``. Teams without a quota (inf) neither lend nor borrow.

The GPUs no team's quota covers (capacity less all quotas: what the quotas leave to inference) are
lent the same way, as the idle quota of a lender with no work (``OUTSIDE_QUOTAS``): a team over
its quota may borrow them where inference leaves them free (the pools' capacity rows and step 0
give inference its GPUs first), and gives them back only to inference, never to a quota owner's
reclaim, since no owner's quota is lent. Kueue cannot lend them: its cohort is its quotas.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from optimizer.stop_pays import value_of_sooner

EPS = 1e-6


OUTSIDE_QUOTAS = "(outside every quota)"
"""The cohort's lender of the GPUs no team's quota covers: a team with no work of its own."""


def outside_quotas(capacity: float, nominal: np.ndarray) -> float:
    """GPUs of ``capacity`` (the pools' GPUs up now) that no team's quota covers."""
    return max(capacity - float(nominal[np.isfinite(nominal)].sum()), 0.0)


def idle_quota(nominal: np.ndarray, wanted: np.ndarray) -> float:
    """GPUs of the teams' quotas that their own queued and running work leaves idle."""
    finite = np.isfinite(nominal)
    return float(np.maximum(nominal[finite] - wanted[finite], 0.0).sum())


def borrowed(used: Sequence[float], nominal: Sequence[float]) -> float:
    """GPUs held beyond their nominal quotas, over all teams with one."""
    return sum(max(u - q, 0.0) for u, q in zip(used, nominal, strict=True) if math.isfinite(q))


def fits_quota(used: Sequence[float], nominal: Sequence[float], idle: float, team: int, gpus: float) -> bool:
    """Whether ``gpus`` more for ``team`` stay within its quota or within what idle quota still lends."""
    quota = nominal[team]
    if used[team] + gpus <= quota + EPS:
        return True
    more = used[team] + gpus - max(used[team], quota)  # GPUs this adds beyond the quota
    return borrowed(used, nominal) + more <= idle + EPS


def cohort_excess(used: Sequence[float], nominal: Sequence[float]) -> float:
    """GPUs the teams with a quota hold beyond all their quotas together (at most 0: the cohort fits)."""
    return sum(u - q for u, q in zip(used, nominal, strict=True) if math.isfinite(q))


def fits_cohort(used: Sequence[float], nominal: Sequence[float], team: int, gpus: float) -> bool:
    """Whether a running job of ``gpus`` may stay, as Kueue keeps admitted work: within its team's
    quota, or borrowing only what the other teams leave unused now (their queued work aside: that
    takes its quota back when it starts, see ``cheapest_reclaim``)."""
    quota = nominal[team]
    if not math.isfinite(quota) or used[team] + gpus <= quota + EPS:
        return True
    return cohort_excess(used, nominal) + gpus <= EPS


class Borrower(NamedTuple):
    """A running job of a team over its quota that a reclaim may stop."""

    job: int
    team: int
    pool: int
    gpus: float
    cost: float  # its weight x (work since checkpoint + restart + preemption penalty), GPU-s
    ends_s: float  # when it ends by its estimate, seconds from now


class Reclaim(NamedTuple):
    """A start of ``gpus`` for ``team`` within its own quota, in ``pool``, short of ``cap_short``
    GPUs there and of ``short`` GPUs in all (quota or pool); its weight and start-up, for whether
    the reclaim pays."""

    team: int
    gpus: float
    pool: int
    cap_short: float
    short: float
    weight: float
    startup_s: float


def cheapest_reclaim(
    used: Sequence[float],
    nominal: Sequence[float],
    need: Reclaim,
    borrowers: Sequence[Borrower],
) -> list[Borrower] | None:
    """The borrowers to stop so that ``need.gpus`` more for ``need.team`` (within its own quota)
    keep the cohort within its quotas and free ``need.cap_short`` GPUs in ``need.pool``: the
    cheapest first, each only while its team still borrows and while it helps; then those not
    needed are given back, the costliest first (Kueue's minimal set). None: they cannot."""
    left = list(used)
    quota_short = cohort_excess(used, nominal) + need.gpus
    cap_short = need.cap_short
    chosen: list[Borrower] = []
    for b in sorted(borrowers, key=lambda b: (b.cost, b.job)):
        if quota_short <= EPS and cap_short <= EPS:
            break
        helps = quota_short > EPS or b.pool == need.pool
        if not helps or left[b.team] <= nominal[b.team] + EPS:
            continue
        chosen.append(b)
        left[b.team] -= b.gpus
        quota_short -= b.gpus
        cap_short -= b.gpus if b.pool == need.pool else 0.0
    if quota_short > EPS or cap_short > EPS:
        return None
    for b in sorted(chosen, key=lambda b: (-b.cost, b.job)):
        back_cap = cap_short + (b.gpus if b.pool == need.pool else 0.0)
        if quota_short + b.gpus <= EPS and back_cap <= EPS:
            chosen.remove(b)
            quota_short += b.gpus
            cap_short = back_cap
    return chosen


def reclaim_pays(
    need: Reclaim,
    chosen: Sequence[Borrower],
    borrowers: Sequence[Borrower],
    horizon_s: float,
    earliness: float,
) -> bool:
    """Whether stopping ``chosen`` for the start pays, by what waiting would cost: without it the
    start waits W for the borrowers to end by themselves and free what it lacks (the horizon if
    they never do). Where its pool has the GPUs and only the lent quota holds it, they stay idle
    while it waits: waiting costs its weight x GPUs x W of work. Where the pool is full too, the
    borrowers work on them meanwhile and waiting costs only time, valued as the plan values it
    (work is worth ``earliness`` more at the start of the horizon than at its end): its weight x
    GPUs x W x earliness x W / horizon. The stops cost the chosen's weight x lost work (since
    checkpoint, restart, penalty) and the start's start-up. So a 1-GPU start waits for a gang that
    would lose hours or for a borrower that ends within the step, and takes its quota back at once
    from a borrower that has just checkpointed."""
    wait_s, gpus = horizon_s, 0.0
    for b in sorted(borrowers, key=lambda b: b.ends_s):
        gpus += b.gpus
        if gpus + EPS >= need.short:
            wait_s = min(b.ends_s, horizon_s)
            break
    if need.cap_short > EPS:
        waiting = value_of_sooner(need.weight, need.gpus, wait_s, horizon_s, earliness)
    else:
        waiting = need.weight * need.gpus * wait_s
    cost = sum(b.cost for b in chosen) + need.weight * need.startup_s * need.gpus
    return waiting > cost

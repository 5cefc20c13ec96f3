"""Team quotas with lending, as Kueue lends unused quota within a cohort; used by the inputs, the
horizon model's rows, step 0, the rounding of later blocks and the reasons.

A team's idle quota is its nominal quota less the GPUs its queued and running jobs want. Any team
that wants more than its own quota may borrow idle quota, and what all teams borrow together
(each team's GPUs beyond its nominal quota) is at most the idle quota of all: what is lent is lent
once, and the GPUs an owner's own work wants are never lent, so when an owner's work comes back
its quota is back at the next step (borrowers' preemptible jobs are stopped for it), whatever the
weights. In the model: a ``borrow[t, b]`` column per team with a quota, the team's row
``used - borrow <= nominal`` and one ``lending`` row per block ``sum(borrow) <= idle``. Teams
without a quota (inf) neither lend nor borrow.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

EPS = 1e-6


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

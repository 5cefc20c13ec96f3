"""Larger gangs first where step 0 would leave GPUs idle (part of rounding step 0, called from
optimizer/step0.py).

The relaxed plan fills a pool with fractions of gangs; rounding starts whole gangs in the plan's
order and backfills what is left. Where the last GPUs of a pool are too few for any waiting gang,
they idle for as long as the jobs around them run, while a larger waiting gang would have run in
place of some of the smaller jobs step 0 starts (first fit in the plan's order, not largest first).
Held-out long-training at hour 0: a 128-GPU gang and four 16-32 GPU jobs of weight 1 started, 21 of
245 GPUs idled for 15 hours, and the 64-GPU weight-1 gang waiting beside them, which would have fitted
in place of two of them, waited 31 hours while its nodes were held.

Such a gang is a candidate where it fits no pool now, but would in place of jobs step 0 starts now
(not running before) of at most its weight and with no deadline; step 0 is placed again with it
first, and the new placement is kept only if it runs more weighted GPUs (weight x GPUs summed over
the jobs running in step 0), stops no running job the first kept and keeps out none of its new
starts heavier than the gang or with a deadline (placed first, a gang may also take GPUs on nodes
that other starts needed). The displaced jobs wait for the
next GPUs to free (or backfill what is left). Pure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

import numpy as np

from optimizer.inputs import PlanInputs
from optimizer.step0_kept import EPS
from optimizer.step0_outcome import Step0Outcome

MAX_TRIES = 3
"""Candidates placed again per decision at most: each is a whole step-0 placement. In
``ebbtide bench-decisions``' mid case (200 jobs) 355 were placed in 200 decisions (82 kept), which
took the decision p50 from 21.6 to 25.0 ms and p99 from 34.4 to 35.5 (target 50); the seed case
(50 jobs) has none."""


class Placement(Protocol):
    """What promotion reads of a step-0 placement (optimizer/step0.py)."""

    pool0: np.ndarray  # [J] pool in step 0, -1 when not running
    cap: list[float]  # per pool: GPUs left
    outcome: Step0Outcome


P = TypeVar("P", bound=Placement)


def place_promoting(inputs: PlanInputs, place: Callable[[tuple[int, ...]], P]) -> P:
    """``place(())`` (the full placement), then ``place`` again with each candidate gang placed
    first as well, kept where that runs more weighted GPUs; the jobs a kept gang displaced are noted
    in its outcome (``went_first``)."""
    first = placed = place(())
    promoted: tuple[int, ...] = ()
    for j in promotion_candidates(inputs, first.pool0, first.cap):
        trial = place((*promoted, j))
        if better(inputs, placed.pool0, trial.pool0, j):
            placed, promoted = trial, (*promoted, j)
    placed.outcome.went_first = went_first(inputs, first.pool0, first.cap, placed.pool0, promoted)
    return placed


def promotion_candidates(inputs: PlanInputs, pool0: np.ndarray, cap: list[float]) -> list[int]:
    """Waiting gangs that no pool takes with the GPUs step 0 leaves, but one would with the GPUs of
    its new starts of at most the gang's weight and without a deadline; heaviest, then largest first."""
    gang, weight = inputs.job_gang, inputs.job_weight
    new = (inputs.job_running_pool < 0) & (pool0 >= 0)
    waiting = (inputs.job_running_pool < 0) & (pool0 < 0) & (inputs.job_remaining_s > 0)
    out: list[int] = []
    for j in np.flatnonzero(waiting)[np.lexsort((-gang[waiting], -weight[waiting]))].tolist():
        movable = new & gives_way(inputs, float(weight[j]))
        for p in np.flatnonzero(inputs.job_allowed[j]).tolist():
            if cap[p] + EPS >= gang[j] or cap[p] < 1.0:
                continue  # it has the GPUs (nodes, quota or holds keep it out), or nothing idles
            room = cap[p] + float(gang[movable & (pool0 == p)].sum())
            if room + EPS >= gang[j]:
                out.append(j)
                break
    return out[:MAX_TRIES]


def weighted_gpus(inputs: PlanInputs, pool0: np.ndarray) -> float:
    """Weight x GPUs summed over the jobs running in step 0."""
    running = pool0 >= 0
    return float((inputs.job_weight[running] * inputs.job_gang[running]).sum())


def gives_way(inputs: PlanInputs, weight: float) -> np.ndarray:
    """[J] jobs a gang of ``weight`` may start in place of: at most its weight, no deadline in the horizon."""
    return (inputs.job_weight <= weight) & (inputs.job_deadline_step > inputs.horizon_steps)


def better(inputs: PlanInputs, first: np.ndarray, trial: np.ndarray, gang_job: int) -> bool:
    """``trial`` (with ``gang_job`` placed first) runs more weighted GPUs than ``first``, stops no
    running job ``first`` kept and keeps out no start of ``first`` that does not give way to it."""
    was_running = inputs.job_running_pool >= 0
    if (was_running & (first >= 0) & (trial < 0)).any():
        return False
    held_back = ~was_running & (first >= 0) & (trial < 0)
    if (held_back & ~gives_way(inputs, float(inputs.job_weight[gang_job]))).any():
        return False
    return weighted_gpus(inputs, trial) > weighted_gpus(inputs, first) + EPS


def went_first(
    inputs: PlanInputs, first: np.ndarray, idle: list[float], final: np.ndarray, promoted: tuple[int, ...]
) -> dict[int, tuple[int, float]]:
    """Each job the first placement started and the final one does not: the promoted gang that
    started in its pool, and the GPUs the first placement left idle there (for its reason)."""
    out: dict[int, tuple[int, float]] = {}
    for d in np.flatnonzero((inputs.job_running_pool < 0) & (first >= 0) & (final < 0)).tolist():
        gang = next((j for j in promoted if final[j] == first[d]), None)
        if gang is not None:
            out[d] = (gang, idle[int(first[d])])
    return out

"""Which running jobs step 0 keeps (part of rounding step 0, optimizer/step0.py): those the
relaxed plan keeps (share of their gang at least the threshold), the non-preemptible ones, those
whose stop would not pay for itself (optimizer/stop_pays.py), and more where stopping all the
others would break the preemption bound. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from optimizer.inputs import PlanInputs
from optimizer.stop_pays import StopRules, stops_that_do_not_pay


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
    unpaid = stops_that_do_not_pay(inputs, share0, wants_out, free0, rules)
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
    return Plan0(share0, share, keep, run_share, pinned, fresh, by_bound)

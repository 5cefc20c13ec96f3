"""Step 0 withdraws a stop whose GPUs would only go to work no heavier than the stopped job
(optimizer/step0.py, ``_withdraw_idle_preemptions``). The first placement backfills above the
lightest stopped job's weight, so a heavier job stopped beside a light one saw its GPUs taken by a
job of its own weight and was swapped for it in the same step (found on mass-arrivals, seed 11: a
weight-4 job stopped for a deadline start that did not fit, its GPU backfilled by another
weight-4 job)."""

from __future__ import annotations

import numpy as np
from optimizer_cases import NOW, job, pool, state

from optimizer.config import PlannerConfig
from optimizer.inputs import PlanInputs, build_inputs
from optimizer.step0 import round_step0
from optimizer.stop_pays import StopRules

CONFIG = PlannerConfig()
RULES = StopRules(CONFIG.min_run_s, CONFIG.preemption_penalty_gpu_h * 3600.0, CONFIG.earliness)


def _inputs() -> PlanInputs:
    """An 8-GPU pool: a 6-GPU job running all day, two 1-GPU jobs (weights 1 and 4) running,
    a weight-8 4-GPU gang waiting and a weight-4 1-GPU job waiting."""
    cluster = state(
        [pool("a", 8)],
        jobs=[
            job("filler", 6, hours=20.0, running_in="a"),
            job("light", 1, weight=1.0, hours=6.0, running_in="a", since_checkpoint_gpu_s=600.0),
            job("heavy", 1, weight=4.0, hours=6.0, running_in="a"),
            job("gang", 4, weight=8.0, hours=4.0),
            job("peer", 1, weight=4.0, hours=2.0),
        ],
    )
    return build_inputs(cluster, {}, NOW, CONFIG)


def _step0(inputs: PlanInputs) -> dict[str, str]:
    """Step 0 from a relaxed plan that keeps the filler, starts the gang and wants both 1-GPU jobs
    out for it: what runs ("run") and what is stopped ("stop")."""
    share0 = np.zeros((inputs.n_jobs, inputs.n_pools))
    share = np.zeros((inputs.n_jobs, inputs.blocks.count))
    for name in ("filler", "gang"):
        share0[inputs.job_ids.index(name), 0] = 1.0
    pool0, _, _, _ = round_step0(
        inputs, np.array([8.0]), np.zeros(1), share0, share, CONFIG.run_threshold, 8, rules=RULES
    )
    running = inputs.job_running_pool >= 0
    return {
        name: "run" if pool0[j] >= 0 else ("stop" if running[j] else "wait")
        for j, name in enumerate(inputs.job_ids)
    }


def test_a_stop_whose_gpus_would_go_to_its_own_weight_is_withdrawn() -> None:
    outcome = _step0(_inputs())
    # the gang does not fit in the 2 GPUs the stops would free: neither stop makes room for it,
    # and the weight-4 job is not swapped for the waiting weight-4 job
    assert outcome["gang"] == "wait"
    assert outcome["heavy"] == "run"
    assert outcome["peer"] == "wait"
    assert outcome["filler"] == "run"

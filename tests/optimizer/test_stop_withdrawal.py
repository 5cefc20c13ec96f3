"""Step 0 withdraws a stop whose GPUs would only go to work no heavier than the stopped job
(optimizer/step0.py, ``_withdraw_idle_preemptions``). The first placement backfills above the
lightest stopped job's weight, so a heavier job stopped beside a light one saw its GPUs taken by a
job of its own weight and was swapped for it in the same step (found on mass-arrivals, seed 11: a
weight-4 job stopped for a deadline start that did not fit, its GPU backfilled by another
weight-4 job)."""

from __future__ import annotations

import numpy as np
from optimizer_cases import NOW, job, pool, state
from scenario_table import Job, Pool, Scenario, build_state

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


def _cleared_gang_inputs() -> PlanInputs:
    """Two 8-GPU nodes. n0: a weight-1 2-GPU job that checkpoints ("long", 10 hours left), 6 GPUs
    free. n1: two weight-1 2-GPU jobs ("a", more work since its checkpoint, and "b") beside a
    4-GPU job that cannot be stopped. Waiting: a weight-4 8-GPU gang and a weight-1 2-GPU job."""
    nodes = Pool("p", 16, gpus_per_node=8, free_by_node=(6, 0), node_names=("n0", "n1"))
    running = dict(running_in="p", checkpoint_interval_s=1800.0, restart_cost_s=60.0)
    row = Scenario(
        "cleared-gang",
        pools=(nodes,),
        jobs=(
            Job("long", 2, hours=10.0, nodes={"n0": 2}, **running),
            Job("a", 2, hours=6.0, nodes={"n1": 2}, since_checkpoint_gpu_s=1200.0, **running),
            Job("b", 2, hours=6.0, nodes={"n1": 2}, **running),
            Job("pinned", 4, hours=20.0, nodes={"n1": 4}, preemptible=False, running_in="p"),
            Job("gang", 8, weight=4.0, hours=4.0),
            Job("peer", 2, hours=2.0),
        ),
    )
    return build_inputs(build_state(row), {}, NOW, CONFIG)


def test_stops_kept_for_a_gang_that_then_no_longer_fits_are_all_withdrawn() -> None:
    # The plan starts the gang and wants "a" and "b" out (1 GPU of inference). The first placement
    # starts the gang by clearing n0 ("long"), which the pool's GPUs then allow: the freed GPUs
    # of "a" and "b" count. 3 GPUs are left over, so "a" is kept, on a node the gang did not take;
    # but with "a" kept the pool no longer has 8 GPUs, nothing is cleared and the gang waits. Placed
    # once more, "b"'s stop makes room for nothing heavier either: it is withdrawn too (before, it
    # was stopped for nothing). "peer" backfills n0, held for the gang: it ends before "long" does.
    inputs = _cleared_gang_inputs()
    share0 = np.zeros((inputs.n_jobs, inputs.n_pools))
    share = np.zeros((inputs.n_jobs, inputs.blocks.count))
    for name in ("long", "pinned", "gang"):
        share0[inputs.job_ids.index(name), 0] = 1.0
    pool0, _, _, _ = round_step0(
        inputs, np.array([15.0]), np.ones(1), share0, share, CONFIG.run_threshold, 8, rules=RULES
    )
    ran = {name: bool(pool0[j] >= 0) for j, name in enumerate(inputs.job_ids)}
    assert ran == {"long": True, "a": True, "b": True, "pinned": True, "gang": False, "peer": True}

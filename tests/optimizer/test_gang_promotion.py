"""Where rounding step 0 leaves GPUs idle, a waiting gang goes before new starts of at most its
weight if that runs more weighted GPUs (optimizer/step0_promote.py). Found on held-out
long-training: step 0 started four 16-32 GPU jobs of weight 1 and 21 of 245 GPUs idled for 15
hours, while the 64-GPU weight-1 gang that would have fitted in place of two of them waited 31
hours. The same repair starts heavy small jobs that the relaxed plan trickled onto GPUs too few for
their gangs beside a lighter whole gang."""

from __future__ import annotations

import numpy as np
from optimizer_cases import NOW, job, pool, state

from optimizer.config import PlannerConfig
from optimizer.inputs import build_inputs
from optimizer.planner import PlannerPolicy
from optimizer.step0 import round_step0
from optimizer.stop_pays import StopRules
from schemas import DecisionCause, JobAction, JobDecision, JobState

CONFIG = PlannerConfig()
RULES = StopRules(CONFIG.min_run_s, CONFIG.preemption_penalty_gpu_h * 3600.0, CONFIG.earliness)


def _decide(*small: JobState) -> dict[str, JobDecision]:
    """One 20-GPU pool where a 16-GPU weight-1 run of 40 hours waits beside ``small``."""
    jobs = [job("big", 16, hours=40.0), *small]
    decision = PlannerPolicy().decide(state([pool("a", 20)], jobs, []), {}, NOW)
    return {d.job_id: d for d in decision.allocation.jobs}


def _running(*small: JobState) -> dict[str, int]:
    gpus = {"big": 16} | {j.spec.job_id: j.spec.gpus for j in small}
    return {job_id: gpus[job_id] for job_id, d in _decide(*small).items() if d.action == JobAction.RUN}


def test_the_larger_gang_runs_where_smaller_starts_would_leave_gpus_idle() -> None:
    """The plan starts two 6-GPU jobs of the same weight (they finish inside the horizon) and 8 GPUs
    would idle, too few for the 16-GPU gang: it starts instead, 16 GPUs busy instead of 12."""
    assert _running(job("s1", 6, hours=20.0), job("s2", 6, hours=20.0)) == {"big": 16}


def test_a_job_the_gang_went_before_says_so() -> None:
    """Each job the gang displaced names it and the GPUs the plan's starts would have left idle."""
    held = _decide(job("s1", 6, hours=20.0), job("s2", 6, hours=20.0))["s1"]
    assert held.cause == DecisionCause.GANG_GOES_FIRST
    assert held.reason.startswith("held: job big (16 GPUs, weight 1) starts in pool a in its place")
    assert "would leave 8 GPUs idle there" in held.reason


def test_heavier_small_jobs_start_where_the_plan_trickles_them() -> None:
    """Two 3-hour weight-2 jobs of 6 GPUs: the relaxed plan runs the 16-GPU gang whole and the small
    jobs on the 4 GPUs left (the same work, a little later), which no rounding can start; they start,
    24 weighted GPUs instead of 16."""
    heavy = (job("s1", 6, hours=3.0, weight=2.0), job("s2", 6, hours=3.0, weight=2.0))
    assert _running(*heavy) == {"s1": 6, "s2": 6}


def test_the_plan_stands_where_nothing_idles_or_the_starts_weigh_more() -> None:
    """Starts that fill the pool, that weigh more than the gang would, or that have a deadline keep
    their GPUs."""
    full = _running(job("s1", 10, hours=20.0), job("s2", 10, hours=20.0))
    heavier = _running(job("s1", 6, hours=20.0, weight=2.0), job("s2", 6, hours=20.0))
    due = _running(*(job(j, 6, hours=20.0, deadline_hours=22.0) for j in ("s1", "s2")))
    assert full == {"s1": 10, "s2": 10}
    assert heavier == {"s1": 6, "s2": 6}
    assert due == {"s1": 6, "s2": 6}


def test_a_start_with_a_deadline_is_never_kept_out() -> None:
    """The plan starts m1 (6 GPUs), d1 (6, due in 10 hours) and x (4) on 20 GPUs, and 4 idle; the
    10-GPU gang fits in place of m1 and x, but placed first it leaves m1 the room d1 needed (starts go
    in the plan's order). It would run more weighted GPUs (20 against 16), but d1 has a deadline:
    the plan stands."""
    jobs = [
        job("big", 10, hours=40.0),
        job("m1", 6, hours=20.0),
        job("d1", 6, hours=8.0, deadline_hours=10.0),
        job("x", 4, hours=20.0),
    ]
    inputs = build_inputs(state([pool("a", 20)], jobs, []), {}, NOW, CONFIG)
    share0 = np.zeros((inputs.n_jobs, inputs.n_pools))
    for name in ("m1", "d1", "x"):
        share0[inputs.job_ids.index(name), 0] = 1.0
    share = np.repeat(share0, inputs.blocks.count, axis=1)
    pool0, _, _, _ = round_step0(inputs, np.array([20.0]), np.zeros(1), share0, share, 0.5, 8, rules=RULES)
    assert {name for j, name in enumerate(inputs.job_ids) if pool0[j] >= 0} == {"m1", "d1", "x"}

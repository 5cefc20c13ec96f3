"""Lost GPU-hours in the bench metrics: a preemption loses the work since the last checkpoint."""

from __future__ import annotations

import pytest
from sim_helpers import allocation, job, tiny_scenario

from schemas import JobAction, JobDecision
from simulator.cluster import Simulator
from simulator.metrics import compute_metrics


def _preempted_after_half_an_hour(checkpoint_interval_s: float | None) -> Simulator:
    """One 2-GPU job run for two 900 s ticks, then preempted by the policy."""
    sim = Simulator(
        tiny_scenario(
            services=[],
            workload={"explicit": [job("j", 5, gpus=2, checkpoint_interval_s=checkpoint_interval_s)]},
        )
    )
    sim.snapshot(sim.clock.now())
    run = JobDecision(job_id="j", action=JobAction.RUN, pool="p", gpus=2, reason="t")
    sim.apply(allocation(sim, jobs=[run]))
    sim.advance()
    sim.advance()
    sim.apply(allocation(sim, jobs=[JobDecision(job_id="j", action=JobAction.PREEMPT, reason="t")]))
    return sim


def test_a_preemption_without_a_checkpoint_counts_its_lost_work() -> None:
    metrics = compute_metrics(_preempted_after_half_an_hour(None), "test", [])
    assert metrics.preemptions == 1
    assert metrics.lost_gpu_hours == pytest.approx(1800 * 2 / 3600)  # 1800 s on 2 GPUs, all lost
    assert metrics.headline()["lost_gpu_hours"] == metrics.lost_gpu_hours


def test_a_preemption_right_after_a_checkpoint_counts_none() -> None:
    sim = _preempted_after_half_an_hour(1800.0)  # the checkpoint lands at 1800 s, the stop just after
    metrics = compute_metrics(sim, "test", [])
    assert metrics.preemptions == 1
    assert metrics.lost_gpu_hours == pytest.approx(0.0)
    assert sim.jobs["j"].done_gpu_s == pytest.approx(1800 * 2)  # the checkpointed work is kept

"""The bench's headline metrics that cannot be gamed: PWT counts only work kept at the window end
(finished or checkpointed), the work in flight it leaves out, weighted completions, JCT percentiles
by class, deadline misses."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from sim_helpers import allocation, job, tiny_scenario

from schemas import JobAction, JobDecision
from simulator.cluster import Simulator
from simulator.metrics import compute_metrics


def _run_all(*jobs: dict[str, Any], window_hours: float = 2) -> Simulator:
    """Start every job at time 0 on pool p and integrate the whole window (no service)."""
    sim = Simulator(
        tiny_scenario(
            services=[], window_hours=window_hours, quick_window_hours=1, workload={"explicit": list(jobs)}
        )
    )
    sim.snapshot(sim.clock.now())
    runs = [
        JobDecision(job_id=j["job_id"], action=JobAction.RUN, pool="p", gpus=j["gpus"], reason="t")
        for j in jobs
    ]
    sim.apply(allocation(sim, jobs=runs))
    for _ in range(sim.steps):
        sim.advance()
    return sim


def test_running_work_without_a_checkpoint_is_not_kept() -> None:
    sim = _run_all(job("never", 5, gpus=2, checkpoint_interval_s=None))
    m = compute_metrics(sim, "t", [])
    assert sim.jobs["never"].done_gpu_s == pytest.approx(2 * 2 * 3600)  # it did run the whole window
    assert m.pwt == 0.0 and m.utilization == pytest.approx(0.0)
    assert m.weighted_completions == 0.0
    assert m.pwt_in_flight == pytest.approx(1 * 2 * 2)  # done in the window, in flight at its end
    assert m.headline()["pwt_in_flight"] == m.pwt_in_flight


def test_only_the_checkpointed_part_of_a_running_job_counts() -> None:
    # checkpoints every 2700 s: at 0.75 h and 1.5 h; the last half hour is at risk
    sim = _run_all(job("ck", 5, gpus=2, priority_weight=3, checkpoint_interval_s=2700))
    m = compute_metrics(sim, "t", [])
    assert m.pwt == pytest.approx(3 * 2 * 1.5)
    assert m.pwt_in_flight == pytest.approx(3 * 2 * 0.5)  # PWT + in flight: all the work done
    assert m.utilization == pytest.approx(2 * 1.5 / (8 * 2))


def test_finished_work_counts_in_full_with_weighted_completions_and_jct() -> None:
    sim = _run_all(
        job("a", 0.5, priority_weight=2, priority_class="high", checkpoint_interval_s=None),
        job("b", 1.0, priority_weight=2, priority_class="high", checkpoint_interval_s=None),
        job("c", 1.5, gpus=2, priority_weight=1, checkpoint_interval_s=None),
    )
    m = compute_metrics(sim, "t", [])
    assert m.pwt == pytest.approx(2 * 0.5 + 2 * 1.0 + 1 * 3.0)
    assert m.weighted_completions == pytest.approx(5.0)
    assert m.pwt_in_flight == 0.0
    assert m.jct_p50_hours_by_class["high"] == pytest.approx(0.75)
    assert m.jct_p95_hours_by_class["high"] == pytest.approx(0.5 + 0.95 * 0.5)
    assert m.jct_p95_hours_by_class["standard"] == pytest.approx(1.5)
    assert m.jct_p95_hours == pytest.approx(float(np.percentile([0.5, 1.0, 1.5], 95)))
    assert {"weighted_completions", "jct_p95_hours"} <= set(m.headline())


def test_deadline_misses_count_late_and_unfinished_jobs() -> None:
    sim = _run_all(
        job("on-time", 0.5, deadline_hour=1.0),
        job("late", 1.5, deadline_hour=1.0),
        job("never", 5, deadline_hour=1.8),
        job("after-window", 5, deadline_hour=10.0),
    )
    assert compute_metrics(sim, "t", []).deadline_misses == 2


def test_the_bench_plot_stacks_the_work_in_flight_on_pwt() -> None:
    """The PNG's PWT panel (bench/plot_bench.py): a bar of PWT + in flight against the reference's
    PWT, the in-flight part hatched on top."""
    from bench.plot_bench import PANELS

    panel = next(p for p in PANELS if p.ylabel.startswith("PWT"))
    sim = _run_all(job("ck", 5, gpus=2, priority_weight=3, checkpoint_interval_s=2700))
    m = compute_metrics(sim, "t", [])  # PWT 9, in flight 3
    ref = replace(m, pwt=6.0)
    assert panel.value(m, ref) == pytest.approx((9.0 + 3.0) / 6.0)
    ((_, in_flight),) = panel.parts
    assert in_flight(m, ref) == pytest.approx(3.0 / 6.0)

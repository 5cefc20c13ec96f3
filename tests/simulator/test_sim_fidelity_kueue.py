"""The simulated side of the Kueue fidelity benchmark (bench/fidelity_kueue.py), without a cluster:
the workload's timeline follows Kueue's rules, and the comparison reads disagreements right."""

from __future__ import annotations

import math

from bench.fidelity_kueue import WORKLOAD, FidelityJob, JobTimes, compare, simulate

JOBS = {j.job_id: j for j in WORKLOAD}


def test_the_simulated_timeline_follows_kueue_rules() -> None:
    timeline = simulate()
    assert all(t.finish is not None for t in timeline.values())
    for job_id, times in timeline.items():
        job = JOBS[job_id]
        assert times.starts and times.starts[0] >= job.submit_step
        # no checkpoints: a job finishes one full run after its last admission
        assert times.finish == times.starts[-1] + job.run_steps
    # BestEffortFIFO by priority then age: j05 (high, newer) is admitted no later than j04 (low)
    assert timeline["j05"].starts[0] <= timeline["j04"].starts[0]
    # j06 (team-a, high, 8 GPUs) is admitted at its submit step by preempting team-a's low j01
    assert timeline["j06"].starts[0] == JOBS["j06"].submit_step
    assert len(timeline["j01"].starts) == 2 and timeline["j01"].starts[0] < 4 < timeline["j01"].finish


def test_compare_reads_order_and_time_differences() -> None:
    jobs = (
        FidelityJob("x1", "team-a", "low", 1, 0, 2),
        FidelityJob("x2", "team-a", "low", 1, 0, 2),
        FidelityJob("x3", "team-b", "low", 1, 1, 2),
    )
    sim = {"x1": JobTimes([0.0], 2.0), "x2": JobTimes([2.0], 4.0), "x3": JobTimes([1.0], 3.0)}
    same = {"x1": JobTimes([0.1], 2.2), "x2": JobTimes([2.3], 4.4), "x3": JobTimes([1.2], 3.3)}
    report = compare(sim, same, jobs=jobs, step_real_s=1.0, kueue_version="test")
    summary = report.summary()
    assert summary["same_admissions"] and math.isclose(summary["kendall_tau"], 1.0)
    late = {"x1": JobTimes([0.1], 2.2), "x2": JobTimes([3.1], 4.4), "x3": JobTimes([1.2], 3.3)}
    assert not compare(sim, late, jobs=jobs, step_real_s=1.0, kueue_version="test").summary()[
        "same_admissions"
    ]
    assert math.isclose(summary["max_start_diff_steps"], 0.3)
    assert math.isclose(summary["max_finish_diff_steps"], 0.4)
    swapped = {"x1": JobTimes([0.1], 2.2), "x2": JobTimes([1.1], 3.2), "x3": JobTimes([2.2], 4.3)}
    report = compare(sim, swapped, jobs=jobs, step_real_s=1.0, kueue_version="test")
    assert report.order("real") == [(0, "x1"), (1, "x2"), (2, "x3")]
    assert report.order("sim") == [(0, "x1"), (1, "x3"), (2, "x2")]
    assert not report.summary()["same_admissions"] and report.discordant_pairs() == 1
    assert report.summary()["kendall_tau"] < 1.0
    unfinished = {"x1": JobTimes([0.0], 2.0), "x2": JobTimes([2.0], None), "x3": JobTimes([], None)}
    summary = compare(sim, unfinished, jobs=jobs, step_real_s=1.0, kueue_version="test").summary()
    assert summary["unfinished_real"] == ["x2", "x3"]

"""The fidelity bench's simulated side and its comparison, without Slurm (the real-Slurm half is
tests/actuators/test_fidelity_slurmsched.py)."""

from __future__ import annotations

import dataclasses

import pytest

from bench.fidelity_slurmsched import WORKLOAD, FidelityJob, JobTimes, compare, nice_of, sbatch_argv, simulate


def test_a_backfill_candidate_ending_just_as_the_reservation_starts_waits() -> None:
    """At step 5 j03 (4 GPUs) is reserved for step 6, when j09 ends; j05 (2 GPUs, 2 steps) fits
    now but would end at 7: it waits (as on Slurm), so j03 is not delayed."""
    times = simulate(WORKLOAD)

    assert times["j03"].start_step == 6.0
    assert times["j05"].start_step == 7.0


def test_a_workload_with_two_jobs_ending_in_one_step_is_refused() -> None:
    clashing = [dataclasses.replace(j, run_steps=2) if j.name == "j09" else j for j in WORKLOAD]

    with pytest.raises(ValueError, match=r"\['j04', 'j09'\]"):
        simulate(clashing)


def test_weights_become_nice_offsets_and_limits_whole_minutes() -> None:
    high, low = FidelityJob("h", 0, 8, 4, 2.0), FidelityJob("l", 0, 2, 3, 1.0)

    assert (nice_of(high, 2.0), nice_of(low, 2.0)) == (0, 500)
    argv = sbatch_argv(low, "gpu", 3.0, 2.0)
    assert {"--gres=gpu:2", "--time=3", "--nice=500", "-N"} <= set(argv)
    assert argv[-1] == "sleep 9"


def test_the_comparison_counts_pairs_started_in_the_other_order() -> None:
    jobs = [FidelityJob(n, 0, 1, 1, 1.0) for n in ("a", "b", "c")]
    sim = {"a": JobTimes(0, 1), "b": JobTimes(1, 2), "c": JobTimes(1, 2)}
    real = {"a": JobTimes(1.2, 2.2), "b": JobTimes(0.1, 1.1), "c": JobTimes(1.1, 2.1)}

    report = compare(jobs, sim, real, scale_s=3.0, clock_speedup=20.0)

    assert report.order_disagreements() == [("a", "b"), ("a", "c")]  # b and c: one step, unordered
    assert report.limits_match_runs
    assert report.max_start_diff_steps == pytest.approx(1.2)
    assert report.to_json()["slurm_start_order"] == ["b", "c", "a"]

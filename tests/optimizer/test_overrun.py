"""A job past its own estimate is expected to run as long again as it has overrun
(optimizer/inputs.expected_left_gpu_s), not to end within the next step: otherwise heavier work
waits a step at a time behind it, each decision planning its start for the next step."""

from __future__ import annotations

import re

from optimizer_cases import job, pool, state
from plan_checks import check_plan

from optimizer.inputs import expected_left_gpu_s
from optimizer.planner import PlannerPolicy
from schemas import JobAction, JobState


def _overrun(j: JobState, past_estimate_h: float) -> JobState:
    """The job with its estimate done and ``past_estimate_h`` hours of its gang more."""
    done = j.spec.estimated_gpu_s + past_estimate_h * 3600.0 * j.spec.gpus
    return j.model_copy(update={"done_gpu_s": done})


def test_an_overrun_job_is_expected_to_need_as_much_again_as_it_has_overrun() -> None:
    running = job("r", 8, hours=2.0, running_in="a")
    assert expected_left_gpu_s(running) == running.remaining_gpu_s == 2.0 * 3600 * 8  # within its estimate
    assert expected_left_gpu_s(_overrun(running, 3.0)) == 3.0 * 3600 * 8
    assert running.model_copy(update={"done_gpu_s": running.spec.estimated_gpu_s}).remaining_gpu_s == 0.0


def test_the_plan_and_the_reasons_expect_an_overrun_job_to_go_on() -> None:
    # 16 GPUs: a weight-1 job 3 hours past its estimate and one with 6 hours left; a weight-5 job
    # of 8 GPUs waits. Taken as ending within the step, the overrun job made the plan start the
    # weight-5 job in the next step (12:15), then again at the next decision, and its reason read
    # "0 GPU-h left"; expected to run 3 hours more, it frees its GPUs at 14:00 or later.
    overrun = _overrun(job("late", 8, hours=1.0, running_in="a", checkpoint_interval_s=1800.0), 3.0)
    jobs = [overrun, job("long", 8, hours=6.0, running_in="a"), job("heavy", 8, weight=5.0, hours=4.0)]
    cluster = state([pool("a", 16)], jobs)
    decision = PlannerPolicy().decide(cluster, {}, cluster.as_of)
    check_plan(cluster, decision, 96, 900)
    actions = {j.job_id: j for j in decision.allocation.jobs}
    assert actions["late"].action == JobAction.RUN and "24.0 GPU-h left" in actions["late"].reason
    heavy = actions["heavy"]
    assert heavy.action == JobAction.HOLD
    start = re.search(r"planned to start at (\d\d):(\d\d)", heavy.reason)
    assert start is not None, heavy.reason
    assert (int(start[1]), int(start[2])) >= (14, 0), heavy.reason

"""Where inference leaves too little room for every running job the plan keeps, the job cheapest
to stop gives way (optimizer/step0.py, ``place_kept``). Found on a held-out long-training
workload: the relaxed plan shaved one GPU off a 64-GPU gang for one more inference replica, and
placing the kept jobs by share stopped the whole gang (its GPUs idled: nothing queued fitted),
while a 2-GPU job ran on. A job within its minimum run counts the rest of that run as lost too, and
no more (placed first whatever the cost, such jobs made a job 40 hours into a run without
checkpoints give way on another held-out workload)."""

from __future__ import annotations

from optimizer_cases import NOW, forecast, job, pool, service, state

from optimizer.planner import PlannerPolicy
from schemas import DecisionCause, JobAction


def _decide(small_started_min_ago: float) -> dict[str, tuple[JobAction, DecisionCause | None]]:
    """A full 72-GPU pool: a 64-GPU weight-1 gang that has just checkpointed (10.7 GPU-h to
    restart), a 2-GPU weight-3 job with 1 GPU-h since its checkpoint, and chat on 6 replicas that
    its forecast grows to 7."""
    gang = job("gang", 64, hours=20.0, running_in="a", restart_cost_s=600.0, checkpoint_interval_s=3600.0)
    small = job(
        "small",
        2,
        weight=3.0,
        hours=2.0,
        running_in="a",
        since_checkpoint_gpu_s=3600.0,
        started_min_ago=small_started_min_ago,
    )
    cluster = state([pool("a", 72)], [gang, small], [service("chat", replicas={"a": 6}, min_replicas=1)])
    decision = PlannerPolicy().decide(cluster, {"chat": forecast("chat", [7.0] * 96)}, NOW)
    assert [(s.service, s.replicas) for s in decision.allocation.services] == [("chat", 7)]
    return {d.job_id: (d.action, d.cause) for d in decision.allocation.jobs}


def test_the_job_cheapest_to_stop_gives_way_to_a_growing_service() -> None:
    actions = _decide(small_started_min_ago=60.0)
    assert actions["gang"][0] == JobAction.RUN
    assert actions["small"] == (JobAction.PREEMPT, DecisionCause.FREED_FOR_INFERENCE)


def test_a_job_within_its_minimum_run_counts_the_rest_of_it_and_no_more() -> None:
    # started 10 minutes ago (minimum run 30): with the 20 minutes left it still costs 3 x (1 + 0.5
    # + 0.67) GPU-hours against the gang's 10.7 + 16, so it gives way, not the gang (placed first
    # whatever the cost, it made the gang give way)
    actions = _decide(small_started_min_ago=10.0)
    assert actions["gang"][0] == JobAction.RUN
    assert actions["small"] == (JobAction.PREEMPT, DecisionCause.FREED_FOR_INFERENCE)


def test_between_jobs_alike_the_one_within_its_minimum_run_stays() -> None:
    """Two 4-GPU jobs of one weight: one 15 minutes past its checkpoint (1 GPU-hour to lose), one
    started 5 minutes ago (nothing to lose yet but the 25 minutes its minimum run has left, 1.67).
    Chat grows by 4 into a full pool: the older one gives way, as churn costs more."""
    old = job("old", 4, running_in="a", since_checkpoint_gpu_s=4 * 900.0, checkpoint_interval_s=1800.0)
    new = job("new", 4, running_in="a", started_min_ago=5.0, checkpoint_interval_s=1800.0)
    cluster = state([pool("a", 16)], [old, new], [service("chat", replicas={"a": 8}, min_replicas=1)])
    decision = PlannerPolicy().decide(cluster, {"chat": forecast("chat", [12.0] * 96)}, NOW)
    assert [(s.service, s.replicas) for s in decision.allocation.services] == [("chat", 12)]
    actions = {d.job_id: d.action for d in decision.allocation.jobs}
    assert actions == {"old": JobAction.PREEMPT, "new": JobAction.RUN}


def test_jobs_just_started_give_way_before_one_deep_in_a_run_without_checkpoints() -> None:
    """The held-out case: a 16-GPU weight-3 job 40 hours into a run without checkpoints, and two
    gangs of the same weight that the last decision started; chat grows by 7 GPUs into a full pool.
    The fresh gangs lose a few GPU-hours each if stopped, the old one 640: they give way."""
    deep = job("deep", 16, weight=3.0, hours=20.0, running_in="a", since_checkpoint_gpu_s=40 * 16 * 3600.0)
    fresh = [
        job(
            name,
            gpus,
            weight=3.0,
            hours=6.0,
            running_in="a",
            started_min_ago=15.0,
            checkpoint_interval_s=1800.0,
        )
        for name, gpus in (("fresh16", 16), ("fresh8", 8))
    ]
    chat = service("chat", replicas={"a": 40}, min_replicas=1)
    cluster = state([pool("a", 80)], [deep, *fresh], [chat])
    decision = PlannerPolicy().decide(cluster, {"chat": forecast("chat", [47.0] * 96)}, NOW)
    assert [(s.service, s.replicas) for s in decision.allocation.services] == [("chat", 47)]
    actions = {d.job_id: d.action for d in decision.allocation.jobs}
    assert actions["deep"] == JobAction.RUN
    assert actions["fresh8"] == JobAction.PREEMPT  # the cheapest that covers the 7 GPUs

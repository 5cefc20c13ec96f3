"""Where inference leaves too little room for every running job the plan keeps, the job cheapest
to stop gives way (optimizer/step0.py, ``place_kept``). Found on a held-out long-training
workload: the relaxed plan shaved one GPU off a 64-GPU gang for one more inference replica, and
placing the kept jobs by share stopped the whole gang (its GPUs idled: nothing queued fitted),
while a 2-GPU job ran on."""

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


def test_a_job_within_its_minimum_run_gives_way_last() -> None:
    # started 10 minutes ago (minimum run 30): the gang gives way instead, however dear
    actions = _decide(small_started_min_ago=10.0)
    assert actions["small"][0] == JobAction.RUN
    assert actions["gang"] == (JobAction.PREEMPT, DecisionCause.FREED_FOR_INFERENCE)

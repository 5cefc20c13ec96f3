"""Bursting over batch (optimizer/surge_burst.py): a service whose demand rose past its peak margin
in a step within the last day gets a burst ceiling of the largest such rise over the running
preemptible jobs of its pool that lose least if stopped, and every service a ceiling of up to its
GPUs there (as a horizontal autoscaler may double), whether its demand surged or not."""

from __future__ import annotations

import math

from optimizer_cases import forecast, job, pool, service, state
from plan_checks import check_plan, check_take_back

from optimizer.config import PlannerConfig
from optimizer.planner import PlannerPolicy
from optimizer.surge_burst import stop_cost, surge_gpus
from schemas import ClusterState, JobAction

FLAT = [10.0, 10.5, 9.5] * 32  # moves of 0.5-1 GPU a step: a peak margin of about 2 GPUs


def _cluster(last: float, per_replica: int = 1, after: list[float] | None = None) -> ClusterState:
    """Chat's day of everyday moves, then ``last``, then ``after`` (steps since)."""
    chat = service("chat", replicas={"a": 12 // per_replica}, gpus_per_replica=per_replica).model_copy(
        update={"demand_history": [*FLAT, last, *(after or [])]}
    )
    jobs = [
        job("fresh", 2, running_in="a", since_checkpoint_gpu_s=0.0),
        job("deep", 2, running_in="a", since_checkpoint_gpu_s=2 * 3 * 3600.0),
        job("heavy", 2, weight=5.0, running_in="a", since_checkpoint_gpu_s=2 * 600.0),
        job("light", 2, running_in="a", since_checkpoint_gpu_s=2 * 600.0, restart_cost_s=300.0),
        job("pinned", 2, running_in="a", preemptible=False),
    ]
    return state([pool("a", 30)], jobs, [chat])  # chat is planned 20 GPUs: none idle


def _decide(cluster: ClusterState, config: PlannerConfig | None = None):
    level = cluster.services[0].demand_history[-1]
    forecasts = {"chat": forecast("chat", [level] * 96, spread=1.0)}
    decision = PlannerPolicy(config=config or PlannerConfig()).decide(cluster, forecasts, cluster.as_of)
    check_plan(cluster, decision, 96, 900)
    check_take_back(cluster, decision)
    return decision


def test_a_rise_past_the_margin_is_a_surge() -> None:
    assert surge_gpus(_cluster(15.4).services[0], 2.2, 900) == 6  # 10.5 -> 15.4, in whole GPUs
    assert surge_gpus(_cluster(11.0).services[0], 2.2, 900) == 0  # an everyday move
    assert surge_gpus(_cluster(15.4, per_replica=4).services[0], 2.2, 900) == 8  # two 4-GPU replicas
    assert surge_gpus(_cluster(5.0).services[0], 2.2, 900) == 0  # a fall


def test_a_surge_within_the_last_day_keeps_its_ceiling_and_one_before_it_does_not() -> None:
    """Bursts recur: the next one starts between two decisions, before any plan has seen it."""
    since = [10.0, 10.5, 9.5]
    assert surge_gpus(_cluster(15.4, after=since * 3).services[0], 2.2, 900) == 6  # 9 steps ago
    assert surge_gpus(_cluster(15.4, after=since * 31).services[0], 2.2, 900) == 6  # 93 steps ago
    assert surge_gpus(_cluster(15.4, after=since * 33).services[0], 2.2, 900) == 0  # 99: over a day
    alloc = _decide(_cluster(15.4, after=since * 3)).allocation
    assert next(s for s in alloc.services if s.service == "chat").burst_gpus >= 6
    assert {j.job_id for j in alloc.jobs if j.borrows_from == "chat"} == {"fresh", "light", "heavy"}


def test_a_surging_service_may_burst_over_the_cheapest_batch() -> None:
    cluster = _cluster(15.4)
    without = _decide(cluster, PlannerConfig(burst_over_batch=False)).allocation
    alloc = _decide(cluster).allocation
    chat, chat_before = (next(s for s in a.services if s.service == "chat") for a in (alloc, without))
    assert chat.gpus == chat_before.gpus
    assert chat.burst_gpus - chat_before.burst_gpus == 6
    assert "its demand rose past its usual move" in chat.reason
    borrowers = {j.job_id for j in alloc.jobs if j.borrows_from == "chat"}
    # cheapest to stop first (weight x GPU-s lost): fresh 0, light 1 x (1200 + 2 x 300) = 1800,
    # heavy 5 x 1200 = 6000, deep 1 x 21600; 6 GPUs take the first three
    assert {j.spec.job_id: stop_cost(j) for j in cluster.jobs if j.spec.job_id in {"light", "heavy"}} == {
        "light": 1800.0,
        "heavy": 6000.0,
    }
    assert borrowers == {"fresh", "light", "heavy"}
    assert "pinned" not in borrowers
    assert all(j.borrows_from is None for j in without.jobs)
    assert all(j.action == JobAction.RUN for j in alloc.jobs)  # nobody is stopped unless demand comes


def test_a_service_that_never_surged_may_still_double_over_the_cheapest_batch() -> None:
    """A launch that triples demand at once has no surge in its past: the ceiling of the service's
    own GPUs lets its autoscaler follow within the step instead of a step later."""
    cheap = [job(f"cheap{i}", 2, running_in="a", since_checkpoint_gpu_s=100.0 * i) for i in range(12)]
    chat = service("chat", replicas={"a": 12}).model_copy(update={"demand_history": [*FLAT, 11.0]})
    cluster = state([pool("a", 42)], [*cheap, job("pinned", 2, running_in="a", preemptible=False)], [chat])
    alloc = _decide(cluster).allocation
    without = _decide(cluster, PlannerConfig(burst_over_batch=False)).allocation
    chat_now, chat_before = (next(s for s in a.services if s.service == "chat") for a in (alloc, without))
    assert chat_now.gpus == chat_before.gpus
    assert chat_now.burst_gpus - chat_before.burst_gpus == chat_now.gpus  # it may double, no more
    assert "rose past its usual move" not in chat_now.reason
    assert "its autoscaler may add up to" in chat_now.reason
    borrowers = {j.job_id for j in alloc.jobs if j.borrows_from == "chat"}
    # the cheapest to stop first: those with the least work since their last checkpoint
    assert borrowers == {f"cheap{i}" for i in range(math.ceil(chat_now.gpus / 2))}
    assert all(j.action == JobAction.RUN for j in alloc.jobs)  # nobody is stopped unless demand comes


def test_a_failure_while_bursting_is_logged_and_the_plan_stands(monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    import optimizer.planner as planner

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("surge bug")

    monkeypatch.setattr(planner, "burst_over_batch", broken)
    decision = _decide(_cluster(15.4))
    assert not any(j.borrows_from for j in decision.allocation.jobs) and not decision.allocation.fallback
    assert "bursting over batch failed" in caplog.text and "surge bug" in caplog.text


def test_a_job_that_never_checkpoints_is_marked_only_within_its_first_step() -> None:
    # a rise of 6.9 wants 7 GPUs; the three cheapest (none checkpoints, each within a step's work
    # of its start) have 6; "deep", 3 hours into a run it would lose whole, is not taken for the 7th
    cluster = _cluster(17.4)
    cluster = cluster.model_copy(update={"pools": [pool("a", 40)]})  # room for chat's plan and all jobs
    alloc = _decide(cluster).allocation
    without = _decide(cluster, PlannerConfig(burst_over_batch=False)).allocation
    chat, chat_before = (next(s for s in a.services if s.service == "chat") for a in (alloc, without))
    assert all(j.action == JobAction.RUN for j in alloc.jobs)
    assert chat.burst_gpus - chat_before.burst_gpus == 6
    assert {j.job_id for j in alloc.jobs if j.borrows_from == "chat"} == {"fresh", "light", "heavy"}

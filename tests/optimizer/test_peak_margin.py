"""Capacity for a step's peak, not its mean (optimizer/peak_margin.py), bursting into idle GPUs
(optimizer/idle_burst.py), not re-lending GPUs a service just took back (optimizer/headroom.py) and
not cutting replicas its autoscaler just added (optimizer/service_inputs.py)."""

from __future__ import annotations

from optimizer_cases import forecast, job, pool, service, state
from plan_checks import check_plan

from optimizer.config import PlannerConfig
from optimizer.peak_margin import (
    TakeBack,
    keep_level,
    kept_margin_gpus,
    plan_margin_gpus,
    step_change_quantile,
)
from optimizer.planner import PlannerPolicy
from schemas import JobAction, ServiceSpec


def test_step_change_quantile_reads_the_recent_changes() -> None:
    # changes of 1 GPU, one of 5: the median is 1, the top of the distribution 5
    history = [10.0, 11.0, 10.0, 11.0, 10.0, 15.0, 14.0, 13.0, 14.0]
    assert step_change_quantile(history, 0.5) == 1.0
    assert step_change_quantile(history, 0.99) == 5.0
    assert step_change_quantile(history, 0.99, window=3) == 1.0  # only the last three changes
    assert step_change_quantile([7.0], 0.9) == 0.0
    assert step_change_quantile(history, 0.0) == 0.0


def test_flat_demand_needs_no_margin() -> None:
    spec = ServiceSpec(service="chat", slo_quantile="p99", startup_s=120.0)
    assert plan_margin_gpus(spec, [8.0] * 100) == 0.0
    assert kept_margin_gpus(spec, [8.0] * 100, 900, TakeBack(25.0, 60.0)) == 0.0


def test_keep_level_weighs_a_late_take_back_against_an_idle_step() -> None:
    slow = ServiceSpec(service="a", slo_quantile="p90", startup_s=90.0)
    fast = ServiceSpec(service="b", slo_quantile="p90", startup_s=30.0)
    # keep while the chance of a rise past it is above step_s / (penalty x (reaction + startup))
    assert keep_level(slow, 900, TakeBack(25.0, 60.0)) == 1.0 - 900 / (25.0 * 150.0)
    assert keep_level(fast, 900, TakeBack(25.0, 0.0)) == 0.0  # a 30 s take-back is not worth a step
    assert keep_level(fast, 900, TakeBack(25.0, 60.0)) == 1.0 - 900 / (25.0 * 90.0)
    assert keep_level(slow, 900, TakeBack(1e6, 60.0)) == 0.9  # never beyond the SLO quantile
    assert keep_level(slow, 900, TakeBack(0.0, 60.0)) == 0.0


def _busy_state(history: list[float], jobs=(), replicas: int = 12):
    chat = service("chat", slo_quantile="p90", replicas={"a": replicas}, startup_s=60.0).model_copy(
        update={"demand_history": history}
    )
    return state([pool("a", 32)], list(jobs), [chat])


def _chat_gpus(decision) -> float:
    return sum(s.gpus + 0.0 for s in decision.allocation.services if s.service == "chat")


def test_the_plan_covers_the_peak_inside_a_step() -> None:
    # step means alternate 8 and 12 GPUs: the mean forecast is 10, a step's peak reaches 12 and more
    history = [8.0, 12.0] * 60
    cluster = _busy_state(history, replicas=16)  # running 16 already: no start-up to plan around
    flat = {"chat": forecast("chat", [10.0] * 96)}
    on = PlannerPolicy(config=PlannerConfig(lend_headroom=False)).decide(cluster, flat, cluster.as_of)
    off = PlannerPolicy(config=PlannerConfig(lend_headroom=False, peak_margin=False)).decide(
        cluster, flat, cluster.as_of
    )
    check_plan(cluster, on, 96, 900)
    assert _chat_gpus(off) == 12.0  # the nowcast floor: the last step's 12
    assert _chat_gpus(on) == 12.0 + 4.0  # plus the change between step means at p90


def test_idle_gpus_raise_the_burst_ceiling_and_nothing_else() -> None:
    cluster = _busy_state([10.0] * 100)
    flat = {"chat": forecast("chat", [10.0] * 96)}
    with_idle = PlannerPolicy().decide(cluster, flat, cluster.as_of).allocation
    without = (
        PlannerPolicy(config=PlannerConfig(burst_into_idle=False))
        .decide(cluster, flat, cluster.as_of)
        .allocation
    )
    chat, chat_off = with_idle.services[0], without.services[0]
    assert (chat.gpus, chat.replicas) == (chat_off.gpus, chat_off.replicas)
    assert chat_off.burst_gpus == 0.0
    assert chat.burst_gpus == 32 - chat.gpus  # no job holds any GPU: the rest of the pool is idle
    assert "left idle in pool a" in chat.reason


def test_idle_burst_never_counts_gpus_jobs_hold() -> None:
    jobs = [job("pinned", 8, weight=5.0, preemptible=False, running_in="a", hours=8.0)]
    cluster = _busy_state([10.0] * 100, jobs)
    decision = PlannerPolicy().decide(cluster, {"chat": forecast("chat", [10.0] * 96)}, cluster.as_of)
    alloc = decision.allocation
    running = sum(j.gpus for j in alloc.jobs if j.action == JobAction.RUN)
    assert running == 8
    for s in alloc.services:
        assert s.gpus + s.burst_gpus + running <= 32 + 1e-9


def test_gpus_taken_back_within_the_step_are_not_lent_again_at_once() -> None:
    # p99 = 30 GPUs reserved for a median of 10: waiting jobs borrow what chat does not keep
    jobs = [job(f"w{i}", 4, weight=1.0 + i, hours=8.0) for i in range(4)]
    chat = service("chat", slo_quantile="p99", replicas={"a": 30}).model_copy(
        update={"demand_history": [10.0] * 100}
    )
    cluster = state([pool("a", 32)], jobs, [chat])
    wide = {"chat": forecast("chat", [10.0] * 96, spread=10.0)}
    policy = PlannerPolicy()
    first = policy.decide(cluster, wide, cluster.as_of).allocation
    kept = sum(s.gpus for s in first.services)
    assert any(j.borrows_from == "chat" for j in first.jobs) and kept < 30
    # within the step its autoscaler took 4 lent GPUs back: it runs kept + 4 now
    took_back = chat.model_copy(update={"replicas": {"a": int(kept) + 4}})
    burst = cluster.model_copy(update={"services": [took_back]})
    second = policy.decide(burst, wide, burst.as_of).allocation
    assert sum(s.gpus for s in second.services) >= kept + 4
    # a fresh planner, which never saw the take-back, lends them again
    fresh = PlannerPolicy().decide(burst, wide, burst.as_of).allocation
    assert sum(s.gpus for s in fresh.services) < kept + 4


def test_replicas_the_autoscaler_added_are_not_cut_at_the_next_step() -> None:
    # nothing to lend (no jobs), the pool idle: the autoscaler scaled chat from 10 to 14 within the step
    history = [10.0] * 100
    flat = {"chat": forecast("chat", [10.0] * 96)}
    policy = PlannerPolicy()
    cluster = _busy_state(history, replicas=10)
    first = policy.decide(cluster, flat, cluster.as_of).allocation
    given = sum(s.gpus for s in first.services)
    assert given < 14
    chat = cluster.services[0].model_copy(update={"replicas": {"a": 14}})
    scaled = cluster.model_copy(update={"services": [chat]})
    assert sum(s.gpus for s in policy.decide(scaled, flat, scaled.as_of).allocation.services) >= 14
    # a planner that gave it 14 itself, or never decided before, plans from the forecast alone
    assert sum(s.gpus for s in PlannerPolicy().decide(scaled, flat, scaled.as_of).allocation.services) < 14

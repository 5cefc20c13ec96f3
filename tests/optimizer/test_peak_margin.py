"""Capacity for a step's peak, not its mean (optimizer/peak_margin.py), bursting into idle GPUs
(optimizer/idle_burst.py), not re-lending GPUs a service just took back (optimizer/headroom.py) and
not cutting replicas its autoscaler just added (optimizer/service_inputs.py)."""

from __future__ import annotations

import math

from optimizer_cases import forecast, job, pool, service, state
from plan_checks import check_plan

from optimizer.config import PlannerConfig
from optimizer.peak_margin import ROBUST_SIGMA, move_scale, move_steps, moves, peak_margin_gpus
from optimizer.planner import PlannerPolicy
from schemas import JobAction


def test_moves_span_the_next_two_steps_and_their_scale_ignores_a_burst() -> None:
    # from each step mean, the largest change to the next two: a burst of 20 moves only two of them
    history = [10.0, 10.0, 10.0, 12.0, 12.0, 14.0, 34.0, 14.0]
    assert moves(history, 2).tolist() == [0.0, 2.0, 2.0, 2.0, 22.0, 20.0]
    assert move_scale(history, 2) == ROBUST_SIGMA * 2.0  # the upper median: the burst does not inflate it
    assert move_scale(history, 2, window=2) == ROBUST_SIGMA * 22.0  # only the last two moves
    assert move_scale([7.0, 8.0], 2) == 0.0  # no step with two after it yet
    assert peak_margin_gpus(history, 2.5, 60.0, 900) == 2.5 * ROBUST_SIGMA * 2.0
    alternating = [8.0, 12.0] * 10  # each step moves 4 from the last, though every other returns
    assert move_scale(alternating, 2) == ROBUST_SIGMA * 4.0


def test_the_move_spans_a_slow_replica_start_up() -> None:
    """A 10-minute start-up on 15-minute steps: a replica asked for now serves 1.5 steps plus 0.67
    after the last observed step mean's centre, so the move spans three steps, not two; start-ups
    of up to half a step keep two."""
    assert [move_steps(s, 900) for s in (0.0, 60.0, 450.0, 600.0, 1800.0)] == [2, 2, 2, 3, 4]
    ramp = [float(i) for i in range(20)]  # one GPU a step
    assert moves(ramp, 3)[0] == 3.0
    assert peak_margin_gpus(ramp, 2.0, 600.0, 900) == 2.0 * ROBUST_SIGMA * 3.0


def test_flat_demand_needs_no_margin() -> None:
    assert peak_margin_gpus([8.0] * 100, 2.5, 60.0, 900) == 0.0


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
    # plus peak_margin_z robust standard deviations of its moves (4 GPUs each), in whole replicas
    margin = PlannerConfig().peak_margin_z * ROBUST_SIGMA * 4.0
    assert 12.0 + margin <= _chat_gpus(on) <= math.ceil(12.0 + margin) + 1


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


def test_every_service_in_a_pool_may_burst_into_its_idle_gpus() -> None:
    """A small service beside a large one gets the idle GPUs in its ceiling too (whichever bursts
    first takes them): given to the largest only, a burst of the small one went short."""
    jobs = [job("pinned", 8, weight=5.0, preemptible=False, running_in="a", hours=8.0)]
    chat = service("chat", replicas={"a": 12}).model_copy(update={"demand_history": [10.0] * 100})
    ocr = service("ocr", replicas={"a": 2}).model_copy(update={"demand_history": [2.0] * 100})
    cluster = state([pool("a", 32)], jobs, [chat, ocr])
    curves = {"chat": forecast("chat", [10.0] * 96), "ocr": forecast("ocr", [2.0] * 96)}
    alloc = PlannerPolicy().decide(cluster, curves, cluster.as_of).allocation
    by_name = {s.service: s for s in alloc.services}
    idle = 32 - 8 - sum(s.gpus for s in alloc.services)
    assert idle >= 1
    for s in by_name.values():
        assert s.burst_gpus == math.floor(idle)
        assert s.gpus + s.burst_gpus + 8 <= 32 + 1e-9
    assert "(shared with ocr: the first to need them takes them)" in by_name["chat"].reason
    assert "(shared with chat: the first to need them takes them)" in by_name["ocr"].reason


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


def test_a_rising_service_keeps_ready_what_it_reaches_before_the_next_decision() -> None:
    # chat rises 0.2 GPUs a step all day; its forecast misses the ramp (flat at the last step's
    # mean, with a wide band the plan reserves and lends). The last mean is centred half a step
    # back: by the end of the next step, when replicas asked for then start loading, demand is
    # 1.5 steps of the ramp above it. What chat keeps ready (does not lend) must already cover it.
    history = [10.0 + 0.2 * i for i in range(100)]
    now = history[-1]
    jobs = [job(f"w{i}", 1, weight=1.0, hours=8.0) for i in range(30)]
    chat = service("chat", slo_quantile="p90", replicas={"a": 32}, startup_s=60.0).model_copy(
        update={"demand_history": history}
    )
    cluster = state([pool("a", 64)], jobs, [chat])
    flat = {"chat": forecast("chat", [now] * 96, spread=10.0)}
    allocation = PlannerPolicy().decide(cluster, flat, cluster.as_of).allocation
    assert any(j.borrows_from == "chat" for j in allocation.jobs)  # the rest of the band is lent
    kept = sum(s.gpus for s in allocation.services if s.service == "chat")
    assert kept >= now + 1.5 * 0.2
    assert kept >= now + peak_margin_gpus(history, PlannerConfig().peak_margin_z, 60.0, 900)

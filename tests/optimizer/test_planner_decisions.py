"""Scenario tests on small hand-made clusters: the decisions themselves and their reasons."""

from __future__ import annotations

from datetime import timedelta

from optimizer_cases import NOW, check_plan, forecast, job, pool, service, state

from optimizer.planner import PlannerPolicy
from schemas import JobAction, JobStatus


def by_id(decision):
    return {d.job_id: d for d in decision.allocation.jobs}


def test_high_priority_job_is_admitted_first() -> None:
    cluster = state(
        [pool("a", 8)],
        [
            job("old-low", 8, weight=1.0, submitted_min_ago=120),
            job("new-high", 8, weight=5.0, submitted_min_ago=1),
        ],
    )
    decision = PlannerPolicy().decide(cluster, {}, NOW)
    check_plan(cluster, decision, 96, 900)
    jobs = by_id(decision)
    assert jobs["new-high"].action == JobAction.RUN and jobs["new-high"].pool == "a"
    assert jobs["old-low"].action == JobAction.HOLD
    assert jobs["old-low"].reason.startswith("held: planned to start at")
    assert "needs a gang of 8 GPUs" in jobs["old-low"].reason


def test_batch_moves_into_the_night_trough() -> None:
    # Inference holds 14 of 16 GPUs for the next 8 hours, then falls to 2 GPUs (night).
    curve = [14.0] * 32 + [2.0] * 64
    cluster = state([pool("a", 16)], [job("train", 8, hours=3.0)], [service("chat", replicas={"a": 14})])
    decision = PlannerPolicy().decide(cluster, {"chat": forecast("chat", curve)}, NOW)
    check_plan(cluster, decision, 96, 900)
    held = by_id(decision)["train"]
    assert held.action == JobAction.HOLD
    assert "planned to start at" in held.reason and "chat" in held.reason
    running_steps = [s.index for s in decision.plan.steps if any(p.job_id == "train" for p in s.jobs)]
    # in the trough (20:00), at the latest one coarse block (3 h) into it
    assert running_steps and 32 <= min(running_steps) <= 32 + 12
    # inference is covered at its forecast throughout
    for step in decision.plan.steps:
        assert sum(c.gpus for c in step.services if c.service == "chat") >= curve[step.index] - 1e-6
    # Receding horizon: at 20:00 the trough is step 0, and the job starts.
    at_night = NOW + timedelta(hours=8)
    night = state([pool("a", 16)], [job("train", 8, hours=3.0)], [service("chat", replicas={"a": 14})])
    night = night.model_copy(update={"as_of": at_night})
    later = PlannerPolicy().decide(night, {"chat": forecast("chat", curve[32:] + [14.0] * 32)}, at_night)
    assert by_id(later)["train"].action == JobAction.RUN


def test_job_runs_now_when_the_trough_is_now() -> None:
    curve = [2.0] * 16 + [14.0] * 80
    cluster = state([pool("a", 16)], [job("train", 8, hours=2.0)], [service("chat", replicas={"a": 2})])
    decision = PlannerPolicy().decide(cluster, {"chat": forecast("chat", curve)}, NOW)
    assert by_id(decision)["train"].action == JobAction.RUN


def test_latency_critical_service_is_never_time_sliced_beyond_its_limit() -> None:
    # 10 replicas on 8 GPUs, and a job waiting for GPUs: only sharing makes room.
    cluster = state(
        [pool("shared", 8, max_share=4)],
        [job("train", 2)],
        services=[
            service("critical", min_replicas=3, latency_critical=True, max_cotenants=1),
            service("tolerant", min_replicas=3, max_cotenants=4, bandwidth_class="low"),
            service("pair", min_replicas=4, latency_critical=True, max_cotenants=2),
        ],
    )
    low = [0.3] * 96
    forecasts = {name: forecast(name, low) for name in ("critical", "tolerant", "pair")}
    decision = PlannerPolicy().decide(cluster, forecasts, NOW)
    check_plan(cluster, decision, 96, 900)
    limits = {"critical": 1, "tolerant": 4, "pair": 2}
    for step in decision.plan.steps:
        for cap in step.services:
            assert cap.gpus >= cap.replicas / limits[cap.service] - 1e-6, (step.index, cap)
    step0 = {c.service: c for c in decision.plan.steps[0].services}
    assert step0["critical"].replicas == 3 and step0["critical"].gpus == 3.0
    # the tolerant service meets its replica minimum on shared GPUs
    assert step0["tolerant"].replicas == 3 and step0["tolerant"].gpus < 3.0
    assert step0["pair"].replicas == 4 and 2.0 <= step0["pair"].gpus < 4.0
    reason = next(d.reason for d in decision.allocation.services if d.service == "tolerant")
    assert "time-sliced" in reason
    assert by_id(decision)["train"].action == JobAction.RUN


def test_rising_demand_preempts_the_lowest_value_job_with_a_reason() -> None:
    cluster = state(
        [pool("a", 16)],
        [
            job("low", 4, weight=1.0, running_in="a"),
            job("high", 8, weight=5.0, running_in="a"),
            job("pinned", 2, weight=1.0, running_in="a", preemptible=False),
        ],
        [service("chat", replicas={"a": 2})],
    )
    curve = [6.0] * 96  # needs 6 GPUs: 16 - 8 - 2 = 6 leaves no room for 'low'
    decision = PlannerPolicy().decide(cluster, {"chat": forecast("chat", curve)}, NOW)
    check_plan(cluster, decision, 96, 900)
    jobs = by_id(decision)
    assert jobs["low"].action == JobAction.PREEMPT and "chat" in jobs["low"].reason
    assert jobs["high"].action == JobAction.RUN and jobs["pinned"].action == JobAction.RUN
    chat = next(d for d in decision.allocation.services if d.service == "chat")
    assert chat.gpus >= 6.0 and "forecast p90 = 6.0" in chat.reason


def test_quota_holds_a_job_and_says_so() -> None:
    cluster = state(
        [pool("a", 32)],
        [job("a1", 8, team="ml", running_in="a"), job("a2", 8, team="ml")],
        quotas_gpus={"ml": 8},
    )
    decision = PlannerPolicy().decide(cluster, {}, NOW)
    check_plan(cluster, decision, 96, 900)
    held = by_id(decision)["a2"]
    assert held.action == JobAction.HOLD and "quota of 8 GPUs" in held.reason


def test_infeasible_state_publishes_a_flagged_greedy_fallback() -> None:
    # Two non-preemptible jobs hold 12 GPUs but a failure left 8 in service: the model is infeasible.
    cluster = state(
        [pool("a", 16, available=8)],
        [job("n1", 6, running_in="a", preemptible=False), job("n2", 6, running_in="a", preemptible=False)],
    )
    policy = PlannerPolicy()
    decision = policy.decide(cluster, {}, NOW)
    assert decision.allocation.fallback and decision.plan.solver.fallback
    assert "infeasible" in (decision.allocation.fallback_reason or "").lower()
    assert "a greedy plan" in (decision.allocation.fallback_reason or "")
    jobs = by_id(decision)
    assert jobs["n1"].action == JobAction.RUN and jobs["n2"].action == JobAction.RUN


def test_fallback_after_a_good_plan_shifts_that_plan() -> None:
    curve = [4.0] * 96
    fc = {"chat": forecast("chat", curve)}
    jobs = [job("j1", 4, preemptible=False), job("j2", 4, preemptible=False), job("j3", 2)]
    cluster = state([pool("a", 16)], jobs, [service("chat", replicas={"a": 4})])
    policy = PlannerPolicy()
    first = policy.decide(cluster, fc, NOW)
    assert not first.allocation.fallback
    started = {d.job_id for d in first.allocation.jobs if d.action == JobAction.RUN}
    assert started == {"j1", "j2", "j3"}
    # Next step: the jobs run, then a node failure leaves 6 GPUs for 8 GPUs of non-preemptible
    # jobs: no feasible plan. The last plan, shifted by one step, is published, flagged.
    later = NOW + timedelta(minutes=15)
    running = [
        j.model_copy(update={"status": JobStatus.RUNNING, "pool": "a", "started_at": NOW})
        if j.spec.job_id != "j3"
        else j
        for j in jobs
    ]
    broken = state([pool("a", 16, available=6)], running, [service("chat", replicas={"a": 4})])
    broken = broken.model_copy(update={"as_of": later})
    second = policy.decide(broken, fc, later)
    assert second.allocation.fallback and second.plan.solver.fallback
    reason = second.allocation.fallback_reason or ""
    assert "infeasible" in reason.lower() and "shifted by one step" in reason
    decided = by_id(second)
    assert decided["j1"].action == JobAction.RUN and decided["j2"].action == JobAction.RUN


def test_bad_forecast_shape_never_escapes_the_loop() -> None:
    cluster = state([pool("a", 8)], [job("j", 2)], [service("chat", replicas={"a": 1}, slo_quantile="p95")])
    short = forecast("chat", [3.0] * 5, step_s=300)  # other step, shorter horizon, no p95 curve
    decision = PlannerPolicy().decide(cluster, {"chat": short}, NOW)
    check_plan(cluster, decision, 96, 900)
    assert by_id(decision)["j"].action == JobAction.RUN


def test_same_inputs_give_the_same_plan_id() -> None:
    cluster = state([pool("a", 8)], [job("j", 2)])
    one = PlannerPolicy().decide(cluster, {}, NOW)
    two = PlannerPolicy().decide(cluster, {}, NOW)
    assert one.plan.plan_id == two.plan.plan_id == one.allocation.plan_id
    assert one.plan.steps[0].jobs == two.plan.steps[0].jobs
    third = PlannerPolicy(name="oracle").decide(cluster, {}, NOW)
    assert third.plan.plan_id != one.plan.plan_id and third.plan.policy == "oracle"


def test_last_line_of_defence_keeps_the_current_state() -> None:
    from optimizer.config import PlannerConfig
    from optimizer.fallback import keep_current_state

    cluster = state(
        [pool("a", 16)], [job("r", 4, running_in="a"), job("q", 4)], [service("chat", replicas={"a": 3})]
    )
    decision = keep_current_state(
        cluster, NOW, PlannerConfig(), plan_id="p", policy="ebbtide", digest="d", reason="greedy failed"
    )
    check_plan(cluster, decision, 96, 900)
    jobs = by_id(decision)
    assert jobs["r"].action == JobAction.RUN and jobs["q"].action == JobAction.HOLD
    assert decision.allocation.fallback and decision.allocation.fallback_reason == "greedy failed"
    assert [(d.service, d.replicas) for d in decision.allocation.services] == [("chat", 3)]


def test_a_service_grows_where_it_runs_when_pools_are_otherwise_equal() -> None:
    """Three identical pools, a service in one of them, demand rising through the day: every step
    of the plan keeps the service in its pool (the stay preference), where nothing else asks
    for a move; later blocks count what a service adds, not where, so without the preference
    its capacity could wander between equal pools from block to block."""
    curve = [4.0 + 8.0 * min(t, 48) / 48 for t in range(96)]
    cluster = state([pool("a", 16), pool("b", 16), pool("c", 16)], [], [service("chat", replicas={"b": 4})])
    decision = PlannerPolicy().decide(cluster, {"chat": forecast("chat", curve)}, NOW)
    check_plan(cluster, decision, 96, 900)
    for step in decision.plan.steps:
        placed = {c.pool for c in step.services if c.service == "chat" and c.replicas > 0}
        assert placed == {"b"}, (step.index, placed)
        assert sum(c.gpus for c in step.services if c.service == "chat") >= curve[step.index] - 1e-6

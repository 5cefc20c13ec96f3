"""Property tests: on random clusters every plan respects capacity in every step, gang sizes,
allowed pools, never preempts a non-preemptible job, has the configured horizon and step, and a
fallback is flagged with its reason."""

from __future__ import annotations

import math
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from optimizer_cases import NOW, forecast, three_pool_cluster
from plan_checks import check_plan

from optimizer.config import PlannerConfig
from optimizer.guard import violations
from optimizer.planner import PlannerPolicy
from schemas import (
    Allocation,
    ClusterState,
    HorizonPlan,
    JobAction,
    JobSpec,
    JobState,
    JobStatus,
    PoolState,
    PoolWindow,
    ServiceSpec,
    ServiceState,
)

SMALL = PlannerConfig(
    horizon_steps=16, fine_steps=2, mid_block_steps=2, mid_until_step=8, coarse_block_steps=4
)


@st.composite
def clusters(draw: st.DrawFn) -> tuple[ClusterState, dict]:
    n_pools = draw(st.integers(1, 4))
    pools = []
    for p in range(n_pools):
        total = draw(st.sampled_from([8, 16, 32, 64]))
        available = draw(st.integers(total // 2, total))
        windows = []
        if draw(st.booleans()):
            start = NOW + timedelta(minutes=15 * draw(st.integers(0, 10)))
            windows.append(
                PoolWindow(
                    start=start, end=start + timedelta(hours=draw(st.integers(1, 4))), gpus_out=total // 2
                )
            )
        pools.append(
            PoolState(
                name=f"p{p}",
                gpu_type=draw(st.sampled_from(["a100", "h100"])),
                gpus_total=total,
                gpus_available=available,
                max_share=draw(st.sampled_from([1, 1, 4])),
                windows=windows,
            )
        )
    names = [p.name for p in pools]
    services, forecasts = [], {}
    for s in range(draw(st.integers(0, 3))):
        allowed = draw(st.lists(st.sampled_from(names), unique=True, max_size=n_pools))
        spec = ServiceSpec(
            service=f"svc{s}",
            gpus_per_replica=draw(st.sampled_from([1, 2])),
            min_replicas=draw(st.integers(0, 2)),
            allowed_pools=allowed,
            latency_critical=draw(st.booleans()),
            max_cotenants=draw(st.sampled_from([1, 2, 4])),
            bandwidth_class=draw(st.sampled_from(["low", "medium", "high"])),
        )
        history = draw(st.lists(st.floats(0, 20, allow_nan=False), min_size=0, max_size=8))
        services.append(ServiceState(spec=spec, replicas={}, demand_history=history))
        if draw(st.booleans()):
            curve = draw(st.lists(st.floats(0, 40, allow_nan=False), min_size=16, max_size=16))
            forecasts[spec.service] = forecast(spec.service, curve, spread=draw(st.floats(0, 5)))
    # running jobs fit what is in service in the first two steps (the test decides at both; a
    # window open then takes its GPUs out)
    soon = NOW + timedelta(seconds=2 * 900)
    free = {
        p.name: min(p.gpus_available, p.gpus_total - sum(w.gpus_out for w in p.windows if w.start < soon))
        for p in pools
    }
    jobs = []
    for j in range(draw(st.integers(0, 12))):
        gang = draw(st.sampled_from([1, 2, 4, 8]))
        allowed = draw(st.lists(st.sampled_from(names), unique=True, max_size=n_pools))
        run_in = None
        if draw(st.booleans()):
            fits = [n for n in (allowed or names) if free[n] >= gang]
            if fits:
                run_in = draw(st.sampled_from(fits))
                free[run_in] -= gang
        spec = JobSpec(
            job_id=f"j{j}",
            gpus=gang,
            allowed_pools=allowed,
            allowed_gpu_types=draw(st.sampled_from([[], ["h100"]])) if run_in is None else [],
            priority_weight=draw(st.sampled_from([1.0, 2.0, 5.0])),
            estimated_gpu_s=draw(st.floats(600, 40 * 3600)) * gang,
            preemptible=draw(st.booleans()),
            team=draw(st.sampled_from(["a", "b"])),
            restart_cost_s=draw(st.sampled_from([0.0, 120.0])),
        )
        jobs.append(
            JobState(
                spec=spec,
                status=JobStatus.RUNNING if run_in else JobStatus.QUEUED,
                submitted_at=NOW - timedelta(hours=1),
                pool=run_in,
                started_at=NOW - timedelta(minutes=30) if run_in else None,
                done_gpu_s=0.0,
                since_checkpoint_gpu_s=draw(st.sampled_from([0.0, 900.0])) if run_in else 0.0,
            )
        )
    quotas = draw(st.sampled_from([{}, {"a": 8}, {"a": 16, "b": 4}]))
    state = ClusterState(
        cluster="test", as_of=NOW, step_s=900, pools=pools, services=services, jobs=jobs, quotas_gpus=quotas
    )
    return state, forecasts


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_every_plan_is_feasible_on_random_clusters(case: tuple[ClusterState, dict]) -> None:
    state, forecasts = case
    policy = PlannerPolicy(config=SMALL)
    decision = policy.decide(state, forecasts, NOW)
    check_plan(state, decision, SMALL.horizon_steps, SMALL.step_s)
    # the next step warm-starts from the same model and must hold the same invariants
    again = policy.decide(state, forecasts, NOW + timedelta(seconds=900))
    check_plan(state.model_copy(update={"as_of": NOW + timedelta(seconds=900)}), again, 16, 900)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_fallback_plans_are_feasible_and_flagged(case: tuple[ClusterState, dict]) -> None:
    """An unusable time limit forces the fallback path on a real HiGHS run."""
    state, forecasts = case
    policy = PlannerPolicy(config=SMALL)
    policy.config = PlannerConfig(**{**SMALL.__dict__, "time_limit_s": 1e-9})
    decision = policy.decide(state, forecasts, NOW)
    check_plan(state, decision, SMALL.horizon_steps, SMALL.step_s)
    # A model HiGHS solves without a single iteration cannot time out; the others must.
    if decision.allocation.fallback:
        assert decision.plan.solver.fallback
        assert "Time limit" in (decision.allocation.fallback_reason or "")
        assert "published a greedy plan" in (decision.allocation.fallback_reason or "")


def test_default_horizon_is_96_steps_of_15_minutes() -> None:
    state = ClusterState(
        cluster="test",
        as_of=NOW,
        step_s=900,
        pools=[PoolState(name="a", gpu_type="h100", gpus_total=8, gpus_available=8)],
    )
    decision = PlannerPolicy().decide(state, {}, NOW)
    check_plan(state, decision, 96, 900)
    assert decision.allocation.valid_until == NOW + timedelta(seconds=900)


def test_published_plan_and_allocation_validate_and_agree_on_step_zero() -> None:
    cluster, forecasts = three_pool_cluster(12)
    config = PlannerConfig(
        horizon_steps=24, fine_steps=3, mid_block_steps=3, mid_until_step=12, coarse_block_steps=6
    )
    planner = PlannerPolicy(config=config)
    for step in range(3):
        now = NOW + timedelta(minutes=15 * step)
        decision = planner.decide(cluster.model_copy(update={"as_of": now}), forecasts, now)
        plan = HorizonPlan.model_validate(decision.plan.model_dump())
        allocation = Allocation.model_validate(decision.allocation.model_dump())
        assert [s.index for s in plan.steps_expanded()] == list(range(config.horizon_steps))
        assert [s.start for s in plan.steps_expanded()] == [
            now + timedelta(seconds=config.step_s * t) for t in range(config.horizon_steps)
        ]
        running = {d.job_id: d.pool for d in allocation.jobs if d.action == JobAction.RUN}
        assert {p.job_id: p.pool for p in plan.step(0).jobs} == running
        assert all(d.reason for d in allocation.jobs) and all(d.reason for d in allocation.services)
        by_pool = {(c.service, c.pool): c.replicas for c in plan.step(0).services}
        for d in allocation.services:
            assert by_pool.get((d.service, d.pool), 0) == d.replicas
        jobs = [
            j.model_copy(update={"status": JobStatus.RUNNING, "pool": running[j.spec.job_id]})
            if j.spec.job_id in running
            else j
            for j in cluster.jobs
        ]
        cluster = cluster.model_copy(update={"jobs": jobs})
    assert math.isfinite(sum(decision.plan.objective.values()))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.sampled_from([1e20, 1e12, 1e6, math.inf]), st.integers(0, 15))
def test_no_plan_breaks_min_replicas_or_pool_capacity_even_on_absurd_demand(
    case: tuple[ClusterState, dict], huge: float, at: int
) -> None:
    """One absurd forecast value (HiGHS reads 1e20 as infinite) or none: every published plan
    keeps each service at its min_replicas where the pools allow it and no pool over-committed
    (optimizer/guard.py), and a plan that is not HiGHS's optimum is flagged with the status."""
    state, forecasts = case
    if math.isfinite(huge):
        for name, fc in list(forecasts.items()):
            quantiles = {
                q: [huge if t == at else v for t, v in enumerate(vs)] for q, vs in fc.quantiles.items()
            }
            forecasts[name] = fc.model_copy(update={"quantiles": quantiles})
    decision = PlannerPolicy(config=SMALL).decide(state, forecasts, NOW)
    check_plan(state, decision, SMALL.horizon_steps, SMALL.step_s)
    horizon_s = SMALL.horizon_steps * state.step_s  # the horizon the planner's own guard checks over
    assert violations(state, decision.allocation, NOW, horizon_s) == []
    if decision.plan.solver.status != "Optimal":
        assert decision.allocation.fallback
        assert decision.plan.solver.status in (decision.allocation.fallback_reason or "")

"""Scenario tables: a case is a row of data (pools, nodes, services, jobs) and the decisions a
policy must make on it, as in Kueue's and KAI's scheduler tests.

A ``Scenario`` row is written as a dataclass literal; ``run_scenario`` builds the ClusterState and
the forecasts from it, calls the policy's ``decide`` (the planner by default, or a baseline), checks
every plan invariant (``plan_checks.check_plan``) and what holds for any decision, then compares
the decisions with the row's wants: per job its action, pool, plan steps and reason fragments; per
service its GPUs, replicas, placement and reason fragments; and the fallback flag and its reason.

Times are minutes relative to ``NOW``; every forecast is issued at ``NOW``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from plan_checks import check_plan

from loop import Decision, Policy
from optimizer.planner import PlannerPolicy
from schemas import (
    BandwidthClass,
    ClusterState,
    DemandForecast,
    JobAction,
    JobSpec,
    JobState,
    JobStatus,
    PoolState,
    PoolWindow,
    ServiceSpec,
    ServiceState,
)

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
STEP_S = 900


@dataclass(frozen=True)
class Pool:
    name: str
    gpus: int
    gpu_type: str = "h100"
    available: int | None = None  # None: all of them
    max_share: int = 1
    gpus_per_node: int = 8
    free_by_node: tuple[int, ...] = ()  # empty: no node detail
    node_names: tuple[str, ...] = ()
    maintenance: tuple[tuple[float, float, tuple[str, ...]], ...] = ()  # (start, end minutes, nodes)


@dataclass(frozen=True)
class Service:
    name: str
    replicas: dict[str, int] = field(default_factory=dict)  # running now, by pool
    forecast: tuple[float, ...] = ()  # p50 demand in GPUs per step; empty: no forecast
    forecast_step_s: int = STEP_S
    history: tuple[float, ...] | None = None  # observed demand; None: the schema's default
    min_replicas: int = 0
    latency_critical: bool = False
    max_cotenants: int = 1
    bandwidth_class: BandwidthClass = "medium"
    slo_quantile: str = "p90"


@dataclass(frozen=True)
class Job:
    id: str
    gpus: int
    weight: float = 1.0
    hours: float = 4.0  # estimated run time
    running_in: str | None = None  # None: queued
    nodes: dict[str, int] = field(default_factory=dict)  # GPUs held by node name, when running
    preemptible: bool = True
    allowed_pools: tuple[str, ...] = ()
    team: str = "default"
    submitted_min_ago: float = 10.0
    started_min_ago: float = 120.0  # past the planner's minimum run (PlannerConfig.min_run_s)
    restart_cost_s: float = 0.0
    since_checkpoint_gpu_s: float = 0.0
    checkpoint_interval_s: float | None = None  # None: never checkpoints
    deadline_min: float | None = None  # minutes from NOW; None: no deadline
    time_limit_h: float | None = None  # the cluster's limit on one run; None: none


@dataclass(frozen=True)
class JobWant:
    action: JobAction
    pool: str | None = None  # checked when given
    says: tuple[str, ...] = ()  # fragments of the reason
    reason_starts: str = ""
    first_step_in: tuple[int, int] | None = None  # the plan step it first runs in, inclusive range


def run(pool: str | None = None, *says: str, first_step_in: tuple[int, int] | None = None) -> JobWant:
    return JobWant(JobAction.RUN, pool, says, first_step_in=first_step_in)


def hold(*says: str, starts: str = "", first_step_in: tuple[int, int] | None = None) -> JobWant:
    return JobWant(JobAction.HOLD, None, says, starts, first_step_in)


def preempt(*says: str) -> JobWant:
    return JobWant(JobAction.PREEMPT, None, says)


@dataclass(frozen=True)
class Serve:
    """Step 0 of a service, summed over its pools; None fields are not checked."""

    replicas: int | None = None
    gpus: float | None = None
    gpus_at_least: float | None = None
    gpus_below: float | None = None
    says: tuple[str, ...] = ()  # fragments of every one of its decisions' reasons
    covers_forecast: bool = False  # every plan step holds at least its p50 forecast
    only_in: tuple[str, ...] | None = None  # every plan step places its replicas only there


@dataclass(frozen=True)
class Scenario:
    id: str
    pools: tuple[Pool, ...]
    jobs: tuple[Job, ...] = ()
    services: tuple[Service, ...] = ()
    quotas: dict[str, int] = field(default_factory=dict)
    policy: Callable[[], Policy] = PlannerPolicy
    at_min: float = 0.0  # when the decision is made
    want_jobs: dict[str, JobWant] = field(default_factory=dict)
    want_services: dict[str, Serve] = field(default_factory=dict)
    want_fallback: bool = False
    fallback_says: tuple[str, ...] = ()
    plan_invariants: bool = True  # False only where the state itself breaks them (a fallback)
    previous: Scenario | None = None  # decided first, by the same policy, with its own wants


def build_pool(p: Pool) -> PoolState:
    available = p.gpus if p.available is None else p.available
    return PoolState(
        name=p.name,
        gpu_type=p.gpu_type,
        gpus_total=p.gpus,
        gpus_available=available,
        max_share=p.max_share,
        gpus_per_node=p.gpus_per_node,
        free_gpus_by_node=list(p.free_by_node),
        node_names=list(p.node_names),
        windows=[
            PoolWindow(
                start=NOW + timedelta(minutes=start),
                end=NOW + timedelta(minutes=end),
                gpus_out=p.gpus_per_node * len(nodes),
                nodes=list(nodes),
            )
            for start, end, nodes in p.maintenance
        ],
    )


def build_service(s: Service) -> ServiceState:
    spec = ServiceSpec(
        service=s.name,
        min_replicas=s.min_replicas,
        latency_critical=s.latency_critical,
        max_cotenants=s.max_cotenants,
        bandwidth_class=s.bandwidth_class,
        slo_quantile=s.slo_quantile,
    )
    history = {} if s.history is None else {"demand_history": list(s.history)}
    return ServiceState(spec=spec, replicas=dict(s.replicas), **history)


def build_job(j: Job) -> JobState:
    spec = JobSpec(
        job_id=j.id,
        gpus=j.gpus,
        priority_weight=j.weight,
        estimated_gpu_s=j.hours * 3600.0 * j.gpus,
        preemptible=j.preemptible,
        allowed_pools=list(j.allowed_pools),
        team=j.team,
        restart_cost_s=j.restart_cost_s,
        checkpoint_interval_s=j.checkpoint_interval_s,
        deadline=None if j.deadline_min is None else NOW + timedelta(minutes=j.deadline_min),
        time_limit_s=None if j.time_limit_h is None else j.time_limit_h * 3600.0,
    )
    running = j.running_in is not None
    return JobState(
        spec=spec,
        status=JobStatus.RUNNING if running else JobStatus.QUEUED,
        submitted_at=NOW - timedelta(minutes=j.submitted_min_ago),
        pool=j.running_in,
        started_at=NOW - timedelta(minutes=j.started_min_ago) if running else None,
        since_checkpoint_gpu_s=j.since_checkpoint_gpu_s if running else 0.0,
        nodes=dict(j.nodes),
    )


def build_state(row: Scenario) -> ClusterState:
    return ClusterState(
        cluster="test",
        as_of=NOW + timedelta(minutes=row.at_min),
        step_s=STEP_S,
        pools=[build_pool(p) for p in row.pools],
        jobs=[build_job(j) for j in row.jobs],
        services=[build_service(s) for s in row.services],
        quotas_gpus=dict(row.quotas),
    )


def build_forecasts(row: Scenario) -> dict[str, DemandForecast]:
    return {
        s.name: DemandForecast(
            cluster="test",
            service=s.name,
            issued_at=NOW,
            step_s=s.forecast_step_s,
            horizon_steps=len(s.forecast),
            quantiles={"p50": list(s.forecast), "p90": list(s.forecast), "p99": list(s.forecast)},
            model="hand-made",
        )
        for s in row.services
        if s.forecast
    }


def run_scenario(row: Scenario, policy: Policy | None = None, *, horizon_steps: int = 96) -> Decision:
    """Decide the row (after its ``previous`` rows, on the same policy) and check every want."""
    policy = policy or row.policy()
    if row.previous is not None:
        run_scenario(row.previous, policy, horizon_steps=horizon_steps)
    state = build_state(row)
    decision = policy.decide(state, build_forecasts(row), state.as_of)
    if row.plan_invariants:
        check_plan(state, decision, horizon_steps, STEP_S)
    check_any_decision(row, state, decision)
    for job_id, want in row.want_jobs.items():
        check_job(row, decision, job_id, want)
    for name, serve in row.want_services.items():
        check_service(row, decision, name, serve)
    return decision


def check_any_decision(row: Scenario, state: ClusterState, decision: Decision) -> None:
    """What holds for every row: one decision per job, one plan id, a future expiry, the fallback
    flag as wanted, step 0 equal to the services' decisions where replicas run, and no GPU shared
    by more replicas than a service's ``max_cotenants``."""
    alloc, plan = decision.allocation, decision.plan
    assert sorted(d.job_id for d in alloc.jobs) == sorted(j.spec.job_id for j in state.jobs)
    assert plan.plan_id == alloc.plan_id and alloc.valid_until > state.as_of
    assert all(d.reason for d in alloc.jobs + alloc.services)
    assert alloc.fallback == row.want_fallback and plan.solver.fallback == row.want_fallback
    for fragment in row.fallback_says:
        assert fragment in (alloc.fallback_reason or ""), (fragment, alloc.fallback_reason)
    step0 = sorted((c.service, c.pool, c.replicas, c.gpus) for c in plan.step(0).services if c.replicas)
    assert step0 == sorted((d.service, d.pool, d.replicas, d.gpus) for d in alloc.services if d.replicas)
    cotenants = {s.spec.service: s.spec.max_cotenants for s in state.services}
    for step in plan.steps_expanded():
        for cap in step.services:
            assert cap.gpus >= cap.replicas / cotenants[cap.service] - 1e-6, (row.id, step.index, cap)


def check_job(row: Scenario, decision: Decision, job_id: str, want: JobWant) -> None:
    got = next(d for d in decision.allocation.jobs if d.job_id == job_id)
    assert got.action == want.action, (row.id, job_id, got)
    assert want.pool is None or got.pool == want.pool, (row.id, job_id, got)
    for fragment in want.says:
        assert fragment in got.reason, (row.id, job_id, fragment, got.reason)
    assert got.reason.startswith(want.reason_starts), (row.id, job_id, got.reason)
    if want.first_step_in is not None:
        steps = [s.index for s in decision.plan.steps_expanded() if any(p.job_id == job_id for p in s.jobs)]
        low, high = want.first_step_in
        assert steps and low <= min(steps) <= high, (row.id, job_id, steps[:1])


def check_service(row: Scenario, decision: Decision, name: str, want: Serve) -> None:
    mine = [d for d in decision.allocation.services if d.service == name]
    gpus, replicas = sum(d.gpus for d in mine), sum(d.replicas for d in mine)
    assert want.replicas is None or replicas == want.replicas, (row.id, name, mine)
    assert want.gpus is None or gpus == want.gpus, (row.id, name, mine)
    assert want.gpus_at_least is None or gpus >= want.gpus_at_least, (row.id, name, mine)
    assert want.gpus_below is None or gpus < want.gpus_below, (row.id, name, mine)
    for fragment in want.says:
        assert mine and all(fragment in d.reason for d in mine), (row.id, name, fragment, mine)
    curve = next(s.forecast for s in row.services if s.name == name)
    for step in decision.plan.steps_expanded():
        caps = [c for c in step.services if c.service == name]
        if want.covers_forecast:
            assert sum(c.gpus for c in caps) >= curve[step.index] - 1e-6, (row.id, name, step.index)
        if want.only_in is not None:
            placed = {c.pool for c in caps if c.replicas > 0}
            assert placed == set(want.only_in), (row.id, name, step.index, placed)

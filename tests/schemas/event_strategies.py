"""Hypothesis strategies for valid events of every catalogue type (used by the codec properties).

Values are drawn inside each field's rules: finite non-negative floats below every bound of
schemas/bounds.py, UTC times within EARLIEST_TIME .. LATEST_TIME (a month of room for the times
built after one), names of 1..253 characters, quantile curves ordered by level and of the
horizon's length.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import strategies as st

from schemas import (
    ActuationResult,
    Allocation,
    ClusterState,
    DeadLetter,
    DemandForecast,
    DemandSample,
    GpuSample,
    HorizonPlan,
    InventoryNode,
    InventoryPool,
    InventoryService,
    JobAction,
    JobDecision,
    JobEvent,
    JobEventKind,
    JobSpec,
    JobState,
    JobStatus,
    PlanBlock,
    PoolInventory,
    PoolState,
    PoolWindow,
    ServiceCapacity,
    ServiceDecision,
    ServiceSpec,
    ServiceState,
    SolverInfo,
)
from schemas.base import Event
from schemas.plan import JobPlacement
from schemas.targets import job_target, plan_target, reservation_target, service_target

names = st.text(min_size=1, max_size=24)
utc_times = st.datetimes(
    min_value=datetime(1970, 1, 1), max_value=datetime(2199, 12, 1), timezones=st.just(UTC)
)
non_neg = st.floats(min_value=0.0, max_value=1e5, allow_nan=False, allow_infinity=False)
positive = st.floats(min_value=1e-6, max_value=1e5, allow_nan=False, allow_infinity=False)
counts = st.integers(min_value=0, max_value=1000)
pos_counts = st.integers(min_value=1, max_value=1000)


def opt(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


gpu_samples = st.builds(
    GpuSample,
    cluster=names,
    pool=names,
    node=names,
    gpu_index=counts,
    gpu_uuid=names,
    time=utc_times,
    utilization_pct=st.floats(0.0, 100.0),
    memory_used_mib=non_neg,
    memory_total_mib=non_neg,
    power_w=non_neg,
    sm_clock_mhz=non_neg,
    mem_clock_mhz=non_neg,
    timeslice_replicas=pos_counts,
    processes=counts,
)


@st.composite
def demand_samples(draw: st.DrawFn) -> DemandSample:
    p50 = draw(opt(non_neg))
    p99 = draw(opt(non_neg))
    if p50 is not None and p99 is not None and p50 > p99:
        p50, p99 = p99, p50
    return DemandSample(
        cluster=draw(names),
        service=draw(names),
        time=draw(utc_times),
        requests_per_s=draw(non_neg),
        gpus_busy=draw(non_neg),
        latency_ms_p50=p50,
        latency_ms_p99=p99,
    )


def job_specs(job_id: str) -> st.SearchStrategy[JobSpec]:
    return st.builds(
        JobSpec,
        job_id=st.just(job_id),
        gpus=pos_counts,
        allowed_pools=st.lists(names, max_size=3),
        allowed_gpu_types=st.lists(names, max_size=3),
        priority_class=names,
        priority_weight=positive,
        estimated_gpu_s=positive,
        deadline=opt(utc_times),
        preemptible=st.booleans(),
        checkpoint_interval_s=opt(positive),
        restart_cost_s=non_neg,
        team=names,
        bandwidth_class=st.sampled_from(["low", "medium", "high"]),
    )


@st.composite
def job_events(draw: st.DrawFn) -> JobEvent:
    job_id = draw(names)
    kind = draw(st.sampled_from(list(JobEventKind)))
    needs_spec = kind == JobEventKind.SUBMITTED
    spec = draw(job_specs(job_id)) if needs_spec or draw(st.booleans()) else None
    return JobEvent(
        cluster=draw(names),
        job_id=job_id,
        kind=kind,
        time=draw(utc_times),
        spec=spec,
        pool=draw(opt(names)),
        done_gpu_s=draw(opt(non_neg)),
        checkpointed_gpu_s=draw(opt(non_neg)),
        message=draw(opt(st.text(max_size=40))),
    )


@st.composite
def demand_forecasts(draw: st.DrawFn) -> DemandForecast:
    steps = draw(st.integers(1, 12))
    levels = sorted(set(draw(st.lists(st.integers(1, 99), max_size=3))) | {50, 90, 99})
    base = draw(st.lists(non_neg, min_size=steps, max_size=steps))
    curves: dict[str, list[float]] = {}
    current = base
    for level in levels:
        bumps = draw(st.lists(st.floats(0.0, 1e6), min_size=steps, max_size=steps))
        current = [v + b for v, b in zip(current, bumps, strict=True)]
        curves[f"p{level}"] = current
    return DemandForecast(
        cluster=draw(names),
        service=draw(names),
        issued_at=draw(utc_times),
        step_s=draw(pos_counts),
        horizon_steps=steps,
        quantiles=curves,
        model=draw(names),
        backtest_rel_mae=draw(opt(non_neg)),
        backtest_coverage_90=draw(opt(st.floats(0.0, 1.0))),
        degraded_reason=draw(opt(st.text(max_size=40))),
    )


solver_infos = st.one_of(
    st.builds(
        SolverInfo, solver=names, status=names, time_ms=non_neg, gap=opt(non_neg), fallback=st.just(False)
    ),
    st.builds(
        SolverInfo,
        solver=names,
        status=names,
        time_ms=non_neg,
        fallback=st.just(True),
        fallback_reason=st.text(min_size=1, max_size=30),
    ),
)


@st.composite
def horizon_plans(draw: st.DrawFn) -> HorizonPlan:
    lengths = draw(st.lists(st.integers(1, 3), min_size=1, max_size=4))
    firsts = [sum(lengths[:k]) for k in range(len(lengths))]
    start = draw(utc_times)
    blocks = [
        PlanBlock(
            first_step=first,
            steps=length,
            services=draw(
                st.lists(
                    st.builds(ServiceCapacity, service=names, pool=names, replicas=counts, gpus=non_neg),
                    max_size=2,
                )
            ),
            jobs=draw(
                st.lists(st.builds(JobPlacement, job_id=names, pool=names, gpus=pos_counts), max_size=2)
            ),
        )
        for first, length in zip(firsts, lengths, strict=True)
    ]
    return HorizonPlan(
        cluster=draw(names),
        plan_id=draw(names),
        policy=draw(names),
        issued_at=start,
        step_s=draw(pos_counts),
        horizon_steps=sum(lengths),
        blocks=blocks,
        objective=draw(st.dictionaries(names, st.floats(-1e9, 1e9), max_size=3)),
        solver=draw(solver_infos),
        inputs_digest=draw(names),
    )


job_decisions = st.one_of(
    st.builds(
        JobDecision,
        job_id=names,
        action=st.just(JobAction.RUN),
        pool=names,
        gpus=pos_counts,
        reason=st.text(min_size=1, max_size=30),
    ),
    st.builds(
        JobDecision,
        job_id=names,
        action=st.sampled_from([JobAction.HOLD, JobAction.PREEMPT]),
        pool=opt(names),
        gpus=counts,
        reason=st.text(min_size=1, max_size=30),
    ),
)


@st.composite
def allocations(draw: st.DrawFn) -> Allocation:
    issued = draw(utc_times)
    jobs = draw(st.lists(job_decisions, max_size=3, unique_by=lambda j: j.job_id))
    fallback = draw(st.booleans())
    return Allocation(
        cluster=draw(names),
        plan_id=draw(names),
        policy=draw(names),
        issued_at=issued,
        step_s=draw(pos_counts),
        valid_until=issued + timedelta(seconds=draw(st.integers(1, 10**6))),
        services=draw(
            st.lists(
                st.builds(
                    ServiceDecision,
                    service=names,
                    pool=names,
                    replicas=counts,
                    gpus=non_neg,
                    reason=st.text(min_size=1, max_size=20),
                ),
                max_size=3,
            )
        ),
        jobs=jobs,
        fallback=fallback,
        fallback_reason=draw(st.text(min_size=1, max_size=20)) if fallback else None,
    )


targets = st.one_of(
    st.builds(service_target, names, names),
    st.builds(job_target, names),
    st.builds(plan_target, names),
    st.builds(reservation_target, names),
)

actuation_results = st.builds(
    ActuationResult,
    cluster=names,
    backend=names,
    plan_id=names,
    action=names,
    target=targets,
    outcome=st.sampled_from(["applied", "already-applied", "retrying", "failed", "skipped"]),
    time=utc_times,
    attempt=counts,
    error=opt(st.text(max_size=30)),
    permanent=st.booleans(),
)

dead_letters = st.builds(
    DeadLetter,
    source_topic=names,
    partition=counts,
    offset=st.integers(0, 2**62),
    key_b64=opt(st.binary(max_size=20).map(lambda b: base64.b64encode(b).decode())),
    raw_b64=st.binary(max_size=64).map(lambda b: base64.b64encode(b).decode()),
    error=st.text(min_size=1, max_size=40),
    consumer=names,
    time=utc_times,
)


@st.composite
def pool_states(draw: st.DrawFn, name: str) -> PoolState:
    total = draw(st.integers(0, 512))
    windows: list[PoolWindow] = []
    if total >= 1:
        for _ in range(draw(st.integers(0, 2))):
            start = draw(utc_times)
            windows.append(
                PoolWindow(
                    start=start,
                    end=start + timedelta(seconds=draw(st.integers(1, 10**6))),
                    gpus_out=draw(st.integers(1, total)),
                )
            )
    return PoolState(
        name=name,
        gpu_type=draw(names),
        gpus_total=total,
        gpus_available=draw(st.integers(0, total)),
        gpus_per_node=draw(pos_counts),
        max_share=draw(st.integers(1, 8)),
        windows=windows,
    )


@st.composite
def cluster_states(draw: st.DrawFn) -> ClusterState:
    pool_names = draw(st.lists(names, min_size=1, max_size=3, unique=True))
    pools = [draw(pool_states(n)) for n in pool_names]
    services = []
    for service in draw(st.lists(names, max_size=2, unique=True)):
        low = draw(st.integers(0, 20))
        spec = ServiceSpec(
            service=service,
            min_replicas=low,
            max_replicas=low + draw(st.integers(0, 20)),
            slo_quantile=draw(st.sampled_from(["p50", "p90", "p99", "p99.9"])),
            latency_critical=draw(st.booleans()),
            max_cotenants=draw(st.integers(1, 4)),
        )
        services.append(
            ServiceState(
                spec=spec,
                replicas=draw(st.dictionaries(st.sampled_from(pool_names), counts)),
                demand_history=draw(st.lists(non_neg, max_size=6)),
            )
        )
    jobs = []
    for job_id in draw(st.lists(names, max_size=2, unique=True)):
        status = draw(st.sampled_from(list(JobStatus)))
        jobs.append(
            JobState(
                spec=draw(job_specs(job_id)),
                status=status,
                submitted_at=draw(utc_times),
                pool=draw(st.sampled_from(pool_names)) if status == JobStatus.RUNNING else None,
                done_gpu_s=draw(non_neg),
                preemptions=draw(counts),
            )
        )
    return ClusterState(
        cluster=draw(names),
        as_of=draw(utc_times),
        step_s=draw(pos_counts),
        pools=pools,
        services=services,
        jobs=jobs,
        quotas_gpus=draw(st.dictionaries(names, counts, max_size=2)),
    )


@st.composite
def inventory_nodes(draw: st.DrawFn, name: str) -> InventoryNode:
    gpus = draw(st.integers(0, 16))
    schedulable = draw(st.booleans())
    return InventoryNode(
        name=name,
        gpus=gpus,
        gpus_free=draw(st.integers(0, gpus)),
        schedulable=schedulable,
        reason=None if schedulable else draw(st.sampled_from(["drained", "down", "NotReady", "cordoned"])),
    )


@st.composite
def pool_inventories(draw: st.DrawFn) -> PoolInventory:
    pools = [
        InventoryPool(
            name=pool,
            gpu_type=draw(names),
            nodes=[draw(inventory_nodes(n)) for n in draw(st.lists(names, max_size=3, unique=True))],
        )
        for pool in draw(st.lists(names, min_size=1, max_size=3, unique=True))
    ]
    low = draw(st.integers(0, 20))
    services = [
        InventoryService(
            service=s,
            pool=pools[0].name,
            replicas=draw(counts),
            min_replicas=low,
            max_replicas=low + draw(st.integers(0, 20)),
        )
        for s in draw(st.lists(names, max_size=2, unique=True))
    ]
    return PoolInventory(
        cluster=draw(names), time=draw(utc_times), source=draw(names), pools=pools, services=services
    )


STRATEGIES: dict[type[Event], st.SearchStrategy[Any]] = {
    GpuSample: gpu_samples,
    DemandSample: demand_samples(),
    JobEvent: job_events(),
    ClusterState: cluster_states(),
    DemandForecast: demand_forecasts(),
    HorizonPlan: horizon_plans(),
    Allocation: allocations(),
    ActuationResult: actuation_results,
    DeadLetter: dead_letters,
    PoolInventory: pool_inventories(),
}

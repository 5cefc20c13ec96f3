"""One realistic, valid instance of every event of the catalogue (and builders for variants).

Shared by the schema tests and the Kafka round-trip tests (tests/kafka puts this folder on
``sys.path``). Builders take keyword overrides so a test can change exactly one field.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

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
from schemas.plan import JobDecision, JobPlacement

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def gpu_sample(**over: Any) -> dict[str, Any]:
    base = dict(
        cluster="east",
        pool="a100",
        node="n1",
        gpu_index=3,
        gpu_uuid="GPU-7f3a",
        time=T0,
        utilization_pct=87.5,
        memory_used_mib=30_000.0,
        memory_total_mib=81_920.0,
        power_w=310.2,
        sm_clock_mhz=1410.0,
        mem_clock_mhz=1593.0,
        timeslice_replicas=2,
        processes=1,
    )
    return {**base, **over}


def demand_sample(**over: Any) -> dict[str, Any]:
    base = dict(
        cluster="east",
        service="chat",
        time=T0,
        requests_per_s=412.0,
        gpus_busy=11.5,
        latency_ms_p50=41.0,
        latency_ms_p99=180.0,
    )
    return {**base, **over}


def job_spec(**over: Any) -> dict[str, Any]:
    base = dict(
        job_id="train-42",
        gpus=8,
        allowed_pools=["a100"],
        allowed_gpu_types=["A100"],
        priority_class="research",
        priority_weight=2.0,
        estimated_gpu_s=28_800.0,
        deadline=T0 + timedelta(days=1),
        preemptible=True,
        checkpoint_interval_s=1800.0,
        restart_cost_s=120.0,
        team="vision",
        bandwidth_class="high",
    )
    return {**base, **over}


def job_event(**over: Any) -> dict[str, Any]:
    base = dict(
        cluster="east",
        job_id="train-42",
        kind=JobEventKind.SUBMITTED,
        time=T0,
        spec=JobSpec(**job_spec()),
        message="queued by alice",
    )
    return {**base, **over}


def demand_forecast(steps: int = 4, **over: Any) -> dict[str, Any]:
    p50 = [10.0 + i for i in range(steps)]
    base = dict(
        cluster="east",
        service="chat",
        issued_at=T0,
        step_s=300,
        horizon_steps=steps,
        quantiles={"p50": p50, "p90": [v * 1.2 for v in p50], "p99": [v * 1.5 for v in p50]},
        model="seasonal-naive",
        backtest_rel_mae=0.12,
        backtest_coverage_90=0.88,
    )
    return {**base, **over}


def horizon_plan(steps: int = 2, **over: Any) -> dict[str, Any]:
    blocks = [
        PlanBlock(
            first_step=i,
            steps=1,
            services=[ServiceCapacity(service="chat", pool="a100", replicas=3, gpus=3.0)],
            jobs=[JobPlacement(job_id="train-42", pool="a100", gpus=8)],
        )
        for i in range(steps)
    ]
    base = dict(
        cluster="east",
        plan_id="plan-1a2b",
        policy="mpc",
        issued_at=T0,
        step_s=300,
        horizon_steps=steps,
        blocks=blocks,
        objective={"slo": 1.5, "cost": 20.25},
        solver=SolverInfo(solver="highs", status="optimal", time_ms=41.0, gap=0.0),
        inputs_digest="sha256-00ff",
    )
    return {**base, **over}


def allocation(**over: Any) -> dict[str, Any]:
    base = dict(
        cluster="east",
        plan_id="plan-1a2b",
        policy="mpc",
        issued_at=T0,
        step_s=300,
        valid_until=T0 + timedelta(seconds=300),
        services=[
            ServiceDecision(service="chat", pool="a100", replicas=3, gpus=3.0, reason="p90 demand 2.7 GPUs")
        ],
        jobs=[JobDecision(job_id="train-42", action=JobAction.RUN, pool="a100", gpus=8, reason="fits")],
    )
    return {**base, **over}


def actuation_result(**over: Any) -> dict[str, Any]:
    base = dict(
        cluster="east",
        backend="slurm",
        plan_id="plan-1a2b",
        action="resume",
        target="job/train-42",
        outcome="applied",
        time=T0,
        attempt=1,
    )
    return {**base, **over}


def cluster_state(**over: Any) -> dict[str, Any]:
    pool = PoolState(
        name="a100",
        gpu_type="A100",
        gpus_total=64,
        gpus_available=60,
        windows=[PoolWindow(start=T0, end=T0 + timedelta(hours=1), gpus_out=8)],
    )
    service = ServiceState(
        spec=ServiceSpec(service="chat", min_replicas=1, max_replicas=12),
        replicas={"a100": 3},
        demand_history=[2.0, 2.5, 3.1],
    )
    job = JobState(
        spec=JobSpec(**job_spec()),
        status=JobStatus.RUNNING,
        submitted_at=T0,
        pool="a100",
        started_at=T0 + timedelta(minutes=5),
        done_gpu_s=100.0,
    )
    base = dict(
        cluster="east",
        as_of=T0,
        step_s=300,
        pools=[pool],
        services=[service],
        jobs=[job],
        quotas_gpus={"vision": 32},
    )
    return {**base, **over}


def dead_letter(**over: Any) -> dict[str, Any]:
    base = dict(
        source_topic="ebbtide.gpu-samples",
        partition=2,
        offset=17,
        key_b64="bjE=",
        raw_b64="e30=",
        error="GpuSample: cluster: Field required",
        consumer="state-service",
        time=T0,
    )
    return {**base, **over}


def pool_inventory(**over: Any) -> dict[str, Any]:
    base = dict(
        cluster="east",
        time=T0,
        source="slurm",
        pools=[
            InventoryPool(
                name="a100",
                gpu_type="A100",
                nodes=[
                    InventoryNode(name="a1", gpus=8, gpus_free=2),
                    InventoryNode(name="a2", gpus=8, gpus_free=0, schedulable=False, reason="drained"),
                ],
            )
        ],
        services=[InventoryService(service="chat", pool="a100", replicas=2, min_replicas=1, max_replicas=8)],
    )
    return {**base, **over}


BUILDERS: dict[type[Event], Any] = {
    GpuSample: gpu_sample,
    DemandSample: demand_sample,
    JobEvent: job_event,
    ClusterState: cluster_state,
    DemandForecast: demand_forecast,
    HorizonPlan: horizon_plan,
    Allocation: allocation,
    ActuationResult: actuation_result,
    DeadLetter: dead_letter,
    PoolInventory: pool_inventory,
}


def sample(event_type: type[Event], **over: Any) -> Event:
    """A valid instance of ``event_type``, validated strictly as a producer would build it."""
    return event_type(**BUILDERS[event_type](**over))

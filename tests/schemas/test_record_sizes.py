"""Every record fits its topic at 10,000 jobs / 50,000 GPUs (issue 19): the largest PoolInventory,
ClusterState, HorizonPlan, Allocation and DemandForecast of a cluster that size, each built fuller
than the loop makes them (every optional field set, every job placed in every block of the plan,
reasons longer than the planner writes), encoded as the services encode them, must be under the
producer's ``message.max.bytes`` uncompressed and, compressed as the topic compresses them (zstd at
librdkafka's default level 3), under the topic's ``max.message.bytes``.

The topic's configuration is what the catalogue creates: tests/kafka/test_topics_admin.py checks
it reaches the broker. The whole loop at that scale through the real broker is
``ebbtide bench-scale`` (bench/scale_loop.py).
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
import zstandard

from optimizer.config import PlannerConfig
from optimizer.inputs import make_blocks
from schemas import (
    Allocation,
    ClusterState,
    DemandForecast,
    HorizonPlan,
    JobAction,
    JobDecision,
    JobPlacement,
    JobSpec,
    JobState,
    JobStatus,
    PlanBlock,
    PoolState,
    PoolWindow,
    ServiceCapacity,
    ServiceDecision,
    ServiceSpec,
    ServiceState,
    SolverInfo,
)
from schemas.base import Event
from schemas.codec import encode
from schemas.inventory import InventoryNode, InventoryPool, InventoryService, PoolInventory
from schemas.topics import ALLOCATIONS, CLUSTER_STATE, FORECASTS, INVENTORY, MAX_RECORD_BYTES, PLANS, Topic
from streams.fold import DEFAULT_HISTORY_STEPS

JOBS, POOLS, GPUS_PER_POOL, SERVICES, GPUS_PER_NODE = 10_000, 16, 3_125, 16, 8
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
RNG = random.Random(19)  # values vary as real ones do, so compression gets no easier than on real records


def _reason() -> str:
    """Longer than the planner's reasons (about 130 characters), with varying figures."""
    pools = [f"pool gpu-pool-{RNG.randrange(POOLS):02d}" for _ in range(6)]
    parts = [f"{pool}: {RNG.uniform(0, 3e3):.1f} GPUs free" for pool in pools]
    return f"run: weight {RNG.uniform(0.1, 9):.3f}, {RNG.uniform(0, 1e6):.1f} GPU-s left; " + "; ".join(parts)


def _gpu_s() -> float:
    return RNG.uniform(0.0, 1e7)


def _job_id(j: int) -> str:
    return f"team-research-training-run-{j:06d}-{RNG.getrandbits(32):08x}"


JOB_IDS = [_job_id(j) for j in range(JOBS)]
BATCH_OVERHEAD = 1024  # a record batch's header and the record's key and framing, generously


def _node(p: int, n: int) -> str:
    return f"gpu-node-{p:02d}-{n:05d}.cluster.example.internal"


def _pools() -> list[PoolState]:
    nodes = -(-GPUS_PER_POOL // GPUS_PER_NODE)
    window = PoolWindow(start=NOW + timedelta(hours=2), end=NOW + timedelta(hours=4), gpus_out=64)
    return [
        PoolState(
            name=f"gpu-pool-{p:02d}",
            gpu_type="h100" if p % 2 else "a100",
            gpus_total=GPUS_PER_POOL,
            gpus_available=GPUS_PER_POOL,
            gpus_per_node=GPUS_PER_NODE,
            windows=[window, window],
            free_gpus_by_node=[GPUS_PER_NODE] * nodes,
            node_names=[_node(p, n) for n in range(nodes)],
        )
        for p in range(POOLS)
    ]


def _job(j: int) -> JobState:
    running = j % 4 != 0  # three in four run: all 50,000 GPUs busy with gangs of up to 16
    gang = (1, 2, 4, 8, 16)[j % 5]
    pool = f"gpu-pool-{j % POOLS:02d}"
    spec = JobSpec(
        job_id=JOB_IDS[j],
        gpus=gang,
        allowed_pools=[pool, f"gpu-pool-{(j + 1) % POOLS:02d}"],
        allowed_gpu_types=["h100", "a100"],
        priority_class="standard",
        priority_weight=2.0,
        estimated_gpu_s=_gpu_s() + 1.0,
        deadline=NOW + timedelta(hours=30),
        checkpoint_interval_s=1800.0,
        restart_cost_s=60.0,
        team="research",
    )
    return JobState(
        spec=spec,
        status=JobStatus.RUNNING if running else JobStatus.QUEUED,
        submitted_at=NOW - timedelta(hours=3),
        pool=pool if running else None,
        started_at=NOW - timedelta(hours=1) if running else None,
        done_gpu_s=_gpu_s(),
        since_checkpoint_gpu_s=_gpu_s(),
        preemptions=3,
        nodes={_node(j % POOLS, (j + k) % 391): min(gang, GPUS_PER_NODE) for k in range(-(-gang // 8))}
        if running
        else {},
    )


def largest_state() -> ClusterState:
    history = DEFAULT_HISTORY_STEPS  # the state service's default: three weeks of 15 min steps
    services = [
        ServiceState(
            spec=ServiceSpec(service=f"inference-service-{s:02d}", allowed_pools=[f"gpu-pool-{s:02d}"]),
            replicas={f"gpu-pool-{p:02d}": 40 for p in range(POOLS)},
            demand_history=[RNG.uniform(0, 2000) for _ in range(history)],
        )
        for s in range(SERVICES)
    ]
    jobs = [_job(j) for j in range(JOBS)]
    return ClusterState(
        cluster="production-cluster-east", as_of=NOW, step_s=900, pools=_pools(), services=services,
        jobs=jobs, quotas_gpus={"research": 20_000, "prod": 20_000, "batch": 10_000},
    )  # fmt: skip


def _capacities() -> list[ServiceCapacity]:
    return [
        ServiceCapacity(
            service=f"inference-service-{s:02d}", pool=f"gpu-pool-{p:02d}", replicas=40,
            gpus=RNG.uniform(0, 40), burst_gpus=RNG.uniform(0, 8),
        )
        for s in range(SERVICES)
        for p in range(POOLS)
    ]  # fmt: skip


def largest_plan() -> HorizonPlan:
    config = PlannerConfig()
    blocks = make_blocks(config, config.horizon_steps, config.step_s)
    placed = [
        JobPlacement(
            job_id=JOB_IDS[j], pool=f"gpu-pool-{RNG.randrange(POOLS):02d}",
            gpus=(1, 2, 4, 8, 16)[j % 5], borrows_from="inference-service-00",
        )
        for j in range(JOBS)
    ]  # fmt: skip
    services = _capacities()
    return HorizonPlan(
        cluster="production-cluster-east", plan_id="plan-" + "f" * 64, policy="ebbtide", issued_at=NOW,
        step_s=config.step_s, horizon_steps=config.horizon_steps,
        blocks=[
            PlanBlock(first_step=first, steps=count, services=services, jobs=placed)
            for first, count in zip(blocks.first_step.tolist(), blocks.n_steps.tolist(), strict=True)
        ],
        objective={"work_gpu_s": 1.23e9, "shortfall_gpu_s": 4.56e6, "preemption_gpu_s": 7.89e5},
        solver=SolverInfo(solver="highs", status="optimal", time_ms=1234.5, gap=0.0001),
        inputs_digest="sha256-" + "0" * 64,
    )  # fmt: skip


def largest_allocation() -> Allocation:
    decisions = [
        JobDecision(
            job_id=JOB_IDS[j], action=JobAction.RUN,
            pool=f"gpu-pool-{j % POOLS:02d}", gpus=(1, 2, 4, 8, 16)[j % 5], reason=_reason(),
            borrows_from="inference-service-00",
        )
        for j in range(JOBS)
    ]  # fmt: skip
    services = [
        ServiceDecision(
            service=c.service, pool=c.pool, replicas=c.replicas, gpus=c.gpus, reason=_reason(),
            burst_gpus=c.burst_gpus,
        )
        for c in _capacities()
    ]  # fmt: skip
    return Allocation(
        cluster="production-cluster-east", plan_id="plan-" + "f" * 64, policy="ebbtide", issued_at=NOW,
        step_s=900, valid_until=NOW + timedelta(seconds=900), services=services, jobs=decisions,
    )  # fmt: skip


def largest_forecast() -> DemandForecast:
    steps = 7 * 96  # a week ahead, seven times the planner's horizon
    base = [RNG.uniform(0, 2000) for _ in range(steps)]
    curves = {q: [v * (1 + k / 10) for v in base] for k, q in enumerate(("p10", "p50", "p90", "p95", "p99"))}
    return DemandForecast(
        cluster="production-cluster-east", service="inference-service-00", issued_at=NOW, step_s=900,
        horizon_steps=steps, quantiles=curves, model="auto-arima-seasonal-naive-ensemble",
        backtest_rel_mae=0.12, backtest_coverage_90=0.88,
    )  # fmt: skip


def _unschedulable(p: int, n: int, per_node: int) -> InventoryNode:
    reason = f"NoSchedule taint nvidia.com/gpu-health={RNG.getrandbits(32):08x}"
    return InventoryNode(
        name=_node(p, n),
        gpus=per_node,
        gpus_free=RNG.randrange(per_node + 1),
        schedulable=False,
        reason=reason,
    )


def largest_inventory() -> PoolInventory:
    """Every node of 50,000 GPUs at 4 GPUs a node (twice the nodes of 8-GPU ones), each unschedulable
    with a reason."""
    per_node = 4
    nodes = -(-GPUS_PER_POOL // per_node)
    pools = [
        InventoryPool(
            name=f"gpu-pool-{p:02d}",
            gpu_type="h100" if p % 2 else "a100",
            nodes=[_unschedulable(p, n, per_node) for n in range(nodes)],
        )
        for p in range(POOLS)
    ]
    services = [
        InventoryService(service=f"inference-service-{s:02d}", pool=f"gpu-pool-{p:02d}", replicas=40)
        for s in range(SERVICES)
        for p in range(POOLS)
    ]
    return PoolInventory(
        cluster="production-cluster-east", time=NOW, source="kubernetes", pools=pools, services=services
    )


def compressed_size(value: bytes) -> int:
    """The record as the topic stores it: zstd at librdkafka's default level (3)."""
    return len(zstandard.ZstdCompressor(level=3).compress(value))


CASES = [
    (INVENTORY, largest_inventory),
    (CLUSTER_STATE, largest_state),
    (PLANS, largest_plan),
    (ALLOCATIONS, largest_allocation),
    (FORECASTS, largest_forecast),
]


@pytest.mark.parametrize(("topic", "build"), CASES, ids=[t.name for t, _ in CASES])
def test_the_largest_record_fits_its_topic(topic: Topic, build) -> None:  # type: ignore[no-untyped-def]
    record: Event = build()
    assert isinstance(record, topic.event)
    value = encode(record)
    assert len(value) <= MAX_RECORD_BYTES, f"{topic.name}: {len(value):,} bytes over the producer's limit"
    stored = compressed_size(value) + BATCH_OVERHEAD
    assert stored <= topic.max_message_bytes, (
        f"{topic.name}: {stored:,} bytes compressed over max.message.bytes {topic.max_message_bytes:,}"
    )


def test_the_largest_plan_repeats_no_step() -> None:
    """The plan is one block per planner block, not one entry per step: 15 blocks for 96 steps."""
    plan = largest_plan()
    assert len(plan.blocks) < plan.horizon_steps
    assert len(plan.steps_expanded()) == plan.horizon_steps
    assert plan.step(95).jobs == plan.blocks[-1].jobs

"""Small builders of cluster snapshots for the loop's tests (real schema objects, no mocks)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from schemas import ClusterState, JobSpec, JobState, JobStatus, PoolState, ServiceSpec, ServiceState

T0 = datetime(2026, 1, 5, 0, 0, tzinfo=UTC)
STEP_S = 900


def at(step: int) -> datetime:
    return T0 + timedelta(seconds=step * STEP_S)


def spec(job_id: str, gpus: int = 2, weight: float = 1.0) -> JobSpec:
    return JobSpec(job_id=job_id, gpus=gpus, estimated_gpu_s=gpus * 3600.0, priority_weight=weight)


def job(
    job_id: str,
    status: JobStatus,
    step: int,
    pool: str | None = None,
    done: float = 0.0,
    since_ckpt: float = 0.0,
    preemptions: int = 0,
    started_step: int | None = None,
    nodes: dict[str, int] | None = None,
) -> JobState:
    return JobState(
        spec=spec(job_id),
        status=status,
        submitted_at=at(step),
        pool=pool,
        started_at=at(started_step) if started_step is not None else None,
        done_gpu_s=done,
        since_checkpoint_gpu_s=since_ckpt,
        preemptions=preemptions,
        nodes=nodes or {},
    )


def pool(name: str, gpus_total: int, available: int, gpus_per_node: int, jobs: list[JobState]) -> PoolState:
    """A pool whose available GPUs fill its nodes in order (``<name>-n<i>``), as telemetry reports them;
    each node's free GPUs are its available ones less what the running jobs hold there."""
    up = [min(gpus_per_node, available - i) for i in range(0, available, gpus_per_node)]
    names = [f"{name}-n{i}" for i in range(len(up))]
    held = {n: 0 for n in names}
    for j in jobs:
        if j.status == JobStatus.RUNNING and j.pool == name:
            for node, gpus in j.nodes.items():
                held[node] += gpus
    return PoolState(
        name=name,
        gpu_type=name.upper(),
        gpus_total=gpus_total,
        gpus_available=available,
        gpus_per_node=gpus_per_node,
        node_names=names,
        free_gpus_by_node=[max(gpus - held[n], 0) for n, gpus in zip(names, up, strict=True)],
    )


def cluster(
    step: int,
    jobs: list[JobState] | None = None,
    history: list[float] | None = None,
    available: int = 16,
    replicas: dict[str, int] | None = None,
) -> ClusterState:
    return ClusterState(
        cluster="c1",
        as_of=at(step),
        step_s=STEP_S,
        pools=[pool("a100", 16, available, 8, jobs or []), pool("t4", 8, 8, 4, jobs or [])],
        services=[
            ServiceState(
                spec=ServiceSpec(service="chat"),
                replicas=replicas or {},
                demand_history=list(history or []),
            )
        ],
        jobs=jobs or [],
    )

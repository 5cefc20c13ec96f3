"""The events a cluster emits between two of its snapshots (pure): how a simulated cluster talks.

A simulator keeps its own ClusterState; to drive the real services it must speak the wire
events a real cluster would send. :func:`events_between` turns (previous snapshot, current
snapshot) into JobEvents, DemandSamples and GpuSamples such that folding them
(:class:`streams.fold.ClusterFold`) onto the previous state gives the current one back. The
collector's simulated mode and ``ebbtide demo`` use it; tests check the round trip.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

from schemas import (
    ClusterState,
    DemandSample,
    GpuSample,
    JobEvent,
    JobEventKind,
    JobState,
    JobStatus,
    PoolState,
)

_GONE_STATUS = {
    JobStatus.FINISHED: JobEventKind.FINISHED,
    JobStatus.FAILED: JobEventKind.FAILED,
    JobStatus.CANCELLED: JobEventKind.CANCELLED,
}


def _progress(
    job: JobState, kind: JobEventKind, time: datetime, cluster: str, nodes: dict[str, int] | None = None
) -> JobEvent:
    return JobEvent(
        cluster=cluster,
        job_id=job.spec.job_id,
        kind=kind,
        time=time,
        pool=job.pool,
        done_gpu_s=job.done_gpu_s,
        checkpointed_gpu_s=max(job.done_gpu_s - job.since_checkpoint_gpu_s, 0.0),
        nodes=nodes,
    )


def job_events_between(previous: ClusterState | None, current: ClusterState) -> list[JobEvent]:
    cluster = current.cluster
    now = current.as_of
    before = {j.spec.job_id: j for j in previous.jobs} if previous is not None else {}
    after = {j.spec.job_id: j for j in current.jobs}
    events: list[JobEvent] = []
    for job_id, job in after.items():
        old = before.get(job_id)
        if old is None:
            events.append(
                JobEvent(
                    cluster=cluster,
                    job_id=job_id,
                    kind=JobEventKind.SUBMITTED,
                    time=job.submitted_at,
                    spec=job.spec,
                )
            )
            old = JobState(spec=job.spec, status=JobStatus.QUEUED, submitted_at=job.submitted_at)
        was_running = old.status == JobStatus.RUNNING
        is_running = job.status == JobStatus.RUNNING
        preempted = job.preemptions > old.preemptions or (was_running and not is_running)
        restarted = is_running and (not was_running or preempted or job.pool != old.pool)
        start_time = job.started_at or now
        if preempted:
            # Preempted before a restart in the same step: the preemption precedes the start.
            when = min(start_time, now) if restarted else now
            events.append(_progress(job, JobEventKind.PREEMPTED, when, cluster))
        if restarted:
            started = JobEvent(
                cluster=cluster,
                job_id=job_id,
                kind=JobEventKind.STARTED,
                time=start_time,
                pool=job.pool,
                nodes=dict(job.nodes) or None,
            )
            events.append(started)
        moved = is_running and not restarted and job.nodes != old.nodes
        if (
            moved
            or job.done_gpu_s != old.done_gpu_s
            or job.since_checkpoint_gpu_s != old.since_checkpoint_gpu_s
        ):
            nodes = dict(job.nodes) if moved else None
            events.append(_progress(job, JobEventKind.PROGRESS, now, cluster, nodes))
    for job_id, old in before.items():
        if job_id not in after:
            kind = _GONE_STATUS.get(old.status, JobEventKind.FINISHED)
            events.append(JobEvent(cluster=cluster, job_id=job_id, kind=kind, time=now))
    return events


def demand_samples_of(current: ClusterState, backfill: bool) -> list[DemandSample]:
    """The demand of the step ending at ``as_of`` (all of the history when ``backfill``)."""
    samples = []
    for svc in current.services:
        history = svc.demand_history if backfill else svc.demand_history[-1:]
        for back, gpus in enumerate(reversed(history)):
            samples.append(
                DemandSample(
                    cluster=current.cluster,
                    service=svc.spec.service,
                    time=current.as_of - timedelta(seconds=back * current.step_s),
                    requests_per_s=0.0,
                    gpus_busy=gpus,
                )
            )
    return samples


def gpu_ids(pool: PoolState, index: int) -> tuple[str, str]:
    """(node, gpu uuid) of a pool's ``index``-th available GPU, stable across steps.

    Where the pool names its nodes that are up (``node_names``), the GPUs are theirs, node by
    node; otherwise nodes are named by position.
    """
    node_index, slot = divmod(index, pool.gpus_per_node)
    if node_index < len(pool.node_names):
        node = pool.node_names[node_index]
        return node, f"GPU-{node}-{slot:02d}"
    node = f"{pool.name}-node-{node_index:04d}"
    return node, f"GPU-{pool.name}-{index:05d}"


def gpu_samples_of(current: ClusterState) -> Iterator[GpuSample]:
    """One sample per available GPU; utilization spreads the pool's allocated GPUs over them."""
    busy_by_pool: dict[str, float] = {}
    for job in current.jobs:
        if job.status == JobStatus.RUNNING and job.pool is not None:
            busy_by_pool[job.pool] = busy_by_pool.get(job.pool, 0.0) + job.spec.gpus
    for svc in current.services:
        for pool_name, replicas in svc.replicas.items():
            busy_by_pool[pool_name] = busy_by_pool.get(pool_name, 0.0) + replicas * svc.spec.gpus_per_replica
    for pool in current.pools:
        busy = busy_by_pool.get(pool.name, 0.0)
        for index in range(pool.gpus_available):
            node, uuid = gpu_ids(pool, index)
            in_use = index < busy
            yield GpuSample(
                cluster=current.cluster,
                pool=pool.name,
                node=node,
                gpu_index=index % pool.gpus_per_node,
                gpu_uuid=uuid,
                time=current.as_of,
                utilization_pct=90.0 if in_use else 0.0,
                memory_used_mib=60_000.0 if in_use else 0.0,
                memory_total_mib=81_920.0,
                power_w=550.0 if in_use else 70.0,
                processes=1 if in_use else 0,
            )


def events_between(
    previous: ClusterState | None, current: ClusterState
) -> tuple[list[JobEvent], list[DemandSample], list[GpuSample]]:
    """Everything the cluster says about the step that ends at ``current.as_of``."""
    return (
        job_events_between(previous, current),
        demand_samples_of(current, backfill=previous is None),
        list(gpu_samples_of(current)),
    )


def seed_of(state: ClusterState) -> ClusterState:
    """The static part of a cluster (pools, service specs, quotas) that the state service starts from."""
    return state.model_copy(
        update={
            "jobs": [],
            "services": [s.model_copy(update={"demand_history": [], "replicas": {}}) for s in state.services],
        }
    )

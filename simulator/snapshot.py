"""The simulator's ClusterState snapshot: everything a policy may see, and nothing more.

Built from the simulator's books: pools (GPUs up, announced maintenance windows, free GPUs per
up node after running jobs, by node name), services (replicas per pool, demand history per step)
and the queued and running jobs with their estimates (never their true work) and the GPUs they
hold per node, and the teams' nominal GPU quotas (scenario ``quotas_gpus``). Failures are not
announced.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from schemas import ClusterState, JobState, JobStatus, PoolState, PoolWindow, ServiceState

if TYPE_CHECKING:
    from simulator.cluster import Simulator


def node_name(pool: str, node: int) -> str:
    """The name a simulated node goes by in the snapshot."""
    return f"{pool}-node{node:03d}"


def node_index(pool: str, name: str) -> int:
    """The node a snapshot's node name stands for (-1: not a node of ``pool``)."""
    prefix = f"{pool}-node"
    tail = name[len(prefix) :] if name.startswith(prefix) else ""
    return int(tail) if tail.isdigit() else -1


def build_snapshot(sim: Simulator, now: datetime) -> ClusterState:
    start = sim.scenario.start
    pools = []
    job_free = sim.job_free_by_node(sim.now_s)
    for pool in sim.pools.values():
        up = pool.up_nodes(sim.now_s)
        windows = [
            PoolWindow(
                start=start + timedelta(seconds=o.start_s),
                end=start + timedelta(seconds=o.end_s),
                gpus_out=pool.gpus_per_node,
                nodes=[node_name(pool.name, o.node)],
            )
            for o in pool.outages
            if o.planned and o.end_s > sim.now_s
        ]
        pools.append(
            PoolState(
                name=pool.name,
                gpu_type=pool.gpu_type,
                gpus_total=pool.gpus_total,
                gpus_available=pool.gpus_up(sim.now_s),
                gpus_per_node=pool.gpus_per_node,
                max_share=pool.max_share,
                windows=windows,
                free_gpus_by_node=[f for f, is_up in zip(job_free[pool.name], up, strict=True) if is_up],
                node_names=[node_name(pool.name, i) for i, is_up in enumerate(up) if is_up],
            )
        )
    services = []
    for name, spec in sim.specs.items():
        replicas = {
            p: math.ceil(c.footprint / spec.gpus_per_replica - 1e-9)
            for p, c in sim.capacity[name].items()
            if c.footprint > 1e-9
        }
        services.append(ServiceState(spec=spec, replicas=replicas, demand_history=sim.demand_history(name)))
    jobs = []
    for job in sim.jobs.values():
        if job.status not in (JobStatus.QUEUED, JobStatus.RUNNING):
            continue
        jobs.append(
            JobState(
                spec=job.spec,
                status=job.status,
                submitted_at=start + timedelta(seconds=job.sim.arrival_s),
                pool=job.pool,
                started_at=None if job.started_at_s is None else start + timedelta(seconds=job.started_at_s),
                done_gpu_s=max(job.done_gpu_s, 0.0),
                since_checkpoint_gpu_s=job.since_checkpoint_gpu_s,
                preemptions=job.preemptions,
                nodes={
                    node_name(job.pool, node): gpus
                    for node, gpus in job.placement.items()
                    if job.pool is not None and gpus > 0
                },
            )
        )
    return ClusterState(
        cluster=sim.scenario.cluster,
        as_of=now,
        step_s=sim.step_s,
        pools=pools,
        services=services,
        jobs=jobs,
        quotas_gpus=dict(sim.scenario.quotas_gpus),
    )

"""The ``priority-backfill`` baseline: Slurm-like multifactor priority with EASY backfill.

Priority = weight_factor x (priority weight / largest weight queued) + age_factor x min(age /
max_age, 1), as Slurm's multifactor plugin. The highest-priority job that cannot start gets a
reservation at the earliest time enough GPUs free up, judged from the running jobs' *estimated*
remaining times; lower-priority jobs may start now only if they do not delay it (they end, by
their estimate, strictly before the reservation, or use GPUs the reserved job will not need; where the
state reports free GPUs per node, that means staying off the nodes closest to free, which are
kept for the reserved gang, as Slurm reserves nodes rather than counts). Inference
keeps a static reservation at its historical peak, as under fifo. No preemption.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from loop import Decision
from schemas import ClusterState, DemandForecast, JobDecision, JobState, JobStatus, ServiceDecision
from simulator.policies.common import PoolBook, age_s, decision, hold, reserve_service, run


@dataclass(frozen=True)
class BackfillSettings:
    weight_factor: float = 1000.0
    age_factor: float = 100.0
    max_age_s: float = 7 * 86400.0


@dataclass
class Reservation:
    job_id: str
    pool: str
    shadow_s: float
    extra_gpus: float
    protected_nodes: frozenset[int] = frozenset()
    """Where the state reports nodes: the nodes closest to free, kept for the reserved gang."""


def nodes_to_protect(book: PoolBook, pool: str, gpus: int) -> frozenset[int]:
    nodes = book.nodes[pool]
    if nodes is None:
        return frozenset()
    per_node = book.gpus_per_node[pool]
    count = max(math.ceil(gpus / per_node), 1)
    emptiest = sorted(range(len(nodes)), key=lambda i: (-nodes[i], i))
    return frozenset(emptiest[:count])


def estimated_end_s(job: JobState, step_s: int) -> float:
    """Seconds from now until a running job ends by its own estimate (at least one step)."""
    remaining = job.spec.estimated_gpu_s - job.done_gpu_s
    return max(remaining / job.spec.gpus, float(step_s))


def reservation_for(job: JobState, state: ClusterState, book: PoolBook) -> Reservation | None:
    best: Reservation | None = None
    available = {p.name: p.gpus_available for p in state.pools}
    for pool in book.allowed(job.spec):
        if available[pool] < job.spec.gpus:
            continue
        free = book.free[pool]
        ends = sorted(
            (estimated_end_s(r, state.step_s), r.spec.gpus)
            for r in state.jobs
            if r.status == JobStatus.RUNNING and r.pool == pool
        )
        shadow = 0.0
        for end_s, gpus in ends:
            if free >= job.spec.gpus:
                break
            free += gpus
            shadow = end_s
        if free < job.spec.gpus:
            continue
        if shadow == 0.0 and ends and not book.fits(pool, job.spec.gpus):
            # Enough GPUs by count but no node fits the gang: it cannot start before some running
            # job ends (which node frees up is not in the state), so that end is a safe shadow.
            shadow = ends[0][0]
        if best is None or shadow < best.shadow_s:
            protected = nodes_to_protect(book, pool, job.spec.gpus)
            best = Reservation(job.spec.job_id, pool, shadow, free - job.spec.gpus, protected)
    return best


class PriorityBackfillPolicy:
    def __init__(self, name: str = "priority-backfill", settings: BackfillSettings | None = None) -> None:
        self.name = name
        self.settings = settings or BackfillSettings()

    def priority(self, job: JobState, now: datetime, top_weight: float) -> float:
        s = self.settings
        return s.weight_factor * job.spec.priority_weight / top_weight + s.age_factor * min(
            age_s(job, now) / s.max_age_s, 1.0
        )

    def decide(self, state: ClusterState, forecasts: Mapping[str, DemandForecast], now: datetime) -> Decision:
        book = PoolBook(state)
        services: list[ServiceDecision] = []
        for svc in state.services:
            peak = max(svc.demand_history, default=0.0)
            gpus = max(math.ceil(peak - 1e-9), svc.spec.min_replicas * svc.spec.gpus_per_replica)
            reason = f"static reservation at historical peak {peak:.1f} GPUs"
            made, _ = reserve_service(book, svc, gpus, reason)
            services.extend(made)
        jobs: list[JobDecision] = []
        queued = [j for j in state.jobs if j.status == JobStatus.QUEUED]
        for job in state.jobs:
            if job.status == JobStatus.RUNNING and job.pool is not None:
                jobs.append(run(job, job.pool, "running; no preemption"))
        top = max((j.spec.priority_weight for j in queued), default=1.0)
        prio = {j.spec.job_id: self.priority(j, now, top) for j in queued}
        queued.sort(key=lambda j: (-prio[j.spec.job_id], j.submitted_at, j.spec.job_id))
        reserved: Reservation | None = None
        for job in queued:
            label = f"priority {prio[job.spec.job_id]:.0f}"
            pool = book.first_fit(job.spec)
            if reserved is None:
                if pool is not None:
                    book.take_job(pool, job.spec.gpus)
                    jobs.append(run(job, pool, f"{label}: highest queued priority that fits on {pool}"))
                    continue
                reserved = reservation_for(job, state, book)
                if reserved is None:
                    where = "no allowed pool can hold it now"
                else:
                    where = f"reserved {reserved.pool} in {reserved.shadow_s / 3600:.1f} h (estimates)"
                jobs.append(hold(job, f"{label}: top of queue, {job.spec.gpus} GPUs not free; {where}"))
                continue
            found = self._backfill_pool(job, book, reserved, state.step_s)
            if found is None:
                jobs.append(hold(job, f"{label}: would delay the reservation of {reserved.job_id}"))
                continue
            pool, avoid = found
            book.take_job(pool, job.spec.gpus, exclude=avoid)
            jobs.append(run(job, pool, f"{label}: backfilled on {pool} without delaying {reserved.job_id}"))
        return decision(self.name, state, forecasts, now, services, jobs, self.settings)

    def _backfill_pool(
        self, job: JobState, book: PoolBook, reserved: Reservation, step_s: int
    ) -> tuple[str, frozenset[int]] | None:
        """A pool where the job may start now without delaying the reserved job, and nodes to avoid."""
        for pool in book.allowed(job.spec):
            if not book.fits(pool, job.spec.gpus):
                continue
            if pool != reserved.pool:
                return pool, frozenset()
            runtime_s = max(job.spec.estimated_gpu_s / job.spec.gpus, float(step_s))
            if runtime_s < reserved.shadow_s:
                # Strictly before, as Slurm: its backfill floors the reserved job's start to its
                # resolution (bf_resolution, 60 s), so one ending just as the reservation starts waits.
                return pool, frozenset()
            if book.nodes[pool] is not None:
                # Node-aware (as Slurm reserves nodes): stay off the nodes kept for the reserved gang.
                if book.fits(pool, job.spec.gpus, exclude=reserved.protected_nodes):
                    return pool, reserved.protected_nodes
            elif job.spec.gpus <= reserved.extra_gpus:
                reserved.extra_gpus -= job.spec.gpus
                return pool, frozenset()
        return None

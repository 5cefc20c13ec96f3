"""The ``reactive`` baseline: inference gets its current demand, batch borrows the rest.

No forecast: each service is sized to its last observed demand (plus optional headroom). Batch
jobs fill what is left in priority order (weight, then age), greedily. When demand rises and a
service does not fit, running preemptible jobs in its pools are preempted, lowest priority
first and, among equals, the one with the least work since its last checkpoint.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from loop import Decision
from schemas import ClusterState, DemandForecast, JobDecision, JobState, JobStatus, ServiceDecision
from simulator.policies.common import PoolBook, decision, hold, preempt, reserve_service, run


@dataclass(frozen=True)
class ReactiveSettings:
    headroom_frac: float = 0.0


class ReactivePolicy:
    def __init__(self, name: str = "reactive", settings: ReactiveSettings | None = None) -> None:
        self.name = name
        self.settings = settings or ReactiveSettings()

    def decide(self, state: ClusterState, forecasts: Mapping[str, DemandForecast], now: datetime) -> Decision:
        book = PoolBook(state)
        running = [j for j in state.jobs if j.status == JobStatus.RUNNING and j.pool is not None]
        victims = sorted(
            (j for j in running if j.spec.preemptible),
            key=lambda j: (j.spec.priority_weight, j.since_checkpoint_gpu_s, j.spec.job_id),
        )
        preempted: dict[str, JobDecision] = {}
        services: list[ServiceDecision] = []
        for svc in state.services:
            current = svc.demand_history[-1] if svc.demand_history else 0.0
            per = svc.spec.gpus_per_replica
            want = max(
                math.ceil(current * (1.0 + self.settings.headroom_frac) - 1e-9),
                svc.spec.min_replicas * per,
            )
            reason = f"current demand {current:.1f} GPUs"
            short = want - sum(
                math.floor(max(book.free[p], 0.0) / per) * per for p in book.service_pools(svc)
            )
            for victim in victims:
                if short <= 0:
                    break
                if victim.spec.job_id in preempted or victim.pool not in book.service_pools(svc):
                    continue
                why = f"{svc.spec.service} demand rose to {current:.1f} GPUs; lowest weight on {victim.pool}"
                preempted[victim.spec.job_id] = preempt(victim, why)
                book.release(victim.pool, victim.spec.gpus)
                short -= victim.spec.gpus
            made, _ = reserve_service(book, svc, want, reason)
            services.extend(made)
        jobs: list[JobDecision] = list(preempted.values())
        for job in running:
            if job.spec.job_id not in preempted and job.pool is not None:
                jobs.append(run(job, job.pool, "running; its GPUs are not needed by inference"))
        queued: list[JobState] = [j for j in state.jobs if j.status == JobStatus.QUEUED]
        queued.sort(key=lambda j: (-j.spec.priority_weight, j.submitted_at, j.spec.job_id))
        for job in queued:
            pool = book.first_fit(job.spec)
            if pool is None:
                jobs.append(hold(job, f"{job.spec.gpus} GPUs not free after inference's current demand"))
                continue
            book.take_job(pool, job.spec.gpus)
            jobs.append(run(job, pool, f"borrowing {job.spec.gpus} GPUs left over on {pool}"))
        return decision(self.name, state, forecasts, now, services, jobs, self.settings)

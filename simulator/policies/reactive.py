"""The ``reactive`` baseline: inference gets its current demand plus headroom, batch borrows the rest.

No forecast: each service is sized to its last observed demand plus headroom (by default the
same as an HPA at 70 % target utilization: 1 / 0.7 - 1 above demand). Batch jobs fill what is
left in priority order (weight, then age), greedily. When demand rises and a service does not
fit, running preemptible jobs in its pools are preempted, lowest priority first and, among
equals, the one with the least work since its last checkpoint. Within the step the in-step
autoscaler may add capacity, taking it back from the batch jobs in the service's pools
(common.burst_headroom, the same rule as kueue-hpa's).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from loop import Decision
from schemas import ClusterState, DemandForecast, JobDecision, JobState, JobStatus, ServiceState
from simulator.policies.common import (
    HPA_TARGET_UTILIZATION,
    PoolBook,
    burst_headroom,
    decision,
    hold,
    run,
    serve_services,
)


@dataclass(frozen=True)
class ReactiveSettings:
    headroom_frac: float = 1.0 / HPA_TARGET_UTILIZATION - 1.0
    burst: bool = True
    """Let the in-step autoscaler take GPUs back from batch on a burst (common.burst_headroom)."""


class ReactivePolicy:
    def __init__(self, name: str = "reactive", settings: ReactiveSettings | None = None) -> None:
        self.name = name
        self.settings = settings or ReactiveSettings()

    def _want(self, svc: ServiceState) -> tuple[float, str]:
        current = svc.demand_history[-1] if svc.demand_history else 0.0
        per = svc.spec.gpus_per_replica
        want = max(
            math.ceil(current * (1.0 + self.settings.headroom_frac) - 1e-9),
            svc.spec.min_replicas * per,
        )
        return float(want), f"current demand {current:.1f} GPUs"

    def decide(self, state: ClusterState, forecasts: Mapping[str, DemandForecast], now: datetime) -> Decision:
        book = PoolBook(state)
        services, preempted = serve_services(book, state, self._want)
        running = [j for j in state.jobs if j.status == JobStatus.RUNNING and j.pool is not None]
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
        if self.settings.burst:
            services, jobs = burst_headroom(services, jobs, state)
        return decision(self.name, state, forecasts, now, services, jobs, self.settings)

"""The ``fifo`` baseline: strict arrival order, no backfill, inference on a static peak reservation.

Each inference service keeps a reservation at the peak of its demand history (its historical
peak, which is static in practice over a run); batch jobs start strictly in arrival order and
the first job that does not fit blocks every job behind it. Running jobs are never preempted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from loop import Decision
from schemas import ClusterState, DemandForecast, JobDecision, JobStatus, ServiceDecision
from simulator.policies.common import PoolBook, decision, hold, reserve_service, run


@dataclass(frozen=True)
class FifoSettings:
    reservation_quantile: float = 1.0
    """Quantile of the demand history reserved for each service (1.0: the peak)."""


class FifoPolicy:
    def __init__(self, name: str = "fifo", settings: FifoSettings | None = None) -> None:
        self.name = name
        self.settings = settings or FifoSettings()

    def decide(self, state: ClusterState, forecasts: Mapping[str, DemandForecast], now: datetime) -> Decision:
        book = PoolBook(state)
        services: list[ServiceDecision] = []
        for svc in state.services:
            history = sorted(svc.demand_history) or [0.0]
            peak = history[int(self.settings.reservation_quantile * (len(history) - 1))]
            gpus = max(math.ceil(peak - 1e-9), svc.spec.min_replicas * svc.spec.gpus_per_replica)
            reason = f"static reservation at historical peak {peak:.1f} GPUs"
            made, _ = reserve_service(book, svc, gpus, reason)
            services.extend(made)
        jobs: list[JobDecision] = []
        queued = []
        for job in state.jobs:
            if job.status == JobStatus.RUNNING and job.pool is not None:
                jobs.append(run(job, job.pool, "running; fifo never preempts"))
            elif job.status == JobStatus.QUEUED:
                queued.append(job)
        queued.sort(key=lambda j: (j.submitted_at, j.spec.job_id))
        blocker: str | None = None
        for job in queued:
            if blocker is not None:
                jobs.append(hold(job, f"waiting behind {blocker} (strict arrival order, no backfill)"))
                continue
            pool = book.first_fit(job.spec)
            if pool is None:
                blocker = job.spec.job_id
                jobs.append(hold(job, f"head of queue: {job.spec.gpus} GPUs not free in an allowed pool"))
                continue
            book.take_job(pool, job.spec.gpus)
            jobs.append(run(job, pool, f"next in arrival order; {job.spec.gpus} GPUs free on {pool}"))
        return decision(self.name, state, forecasts, now, services, jobs, self.settings)

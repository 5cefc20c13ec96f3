"""The simulated in-step autoscaler: services take back burst headroom lent to batch jobs.

An Allocation may give a service ``burst_gpus`` in a pool and mark jobs that run on that headroom
with ``borrows_from``. Between decisions, at every sub-tick, a service whose demand is above its
capacity (ready and loading replicas) scales up by whole replicas, at most by its remaining
burst allowance: free GPUs first, then it preempts its own borrowers in that pool (lowest weight,
then least work since the last checkpoint). New replicas serve after the service's start-up time,
as any scale-up. This is what a horizontal autoscaler over priority-class preemption does on
Kubernetes. The rules are the same for every policy: the planner lends its idle reservation
(optimizer/headroom.py) and gives each service a ceiling over the batch that loses least if stopped
(optimizer/surge_burst.py); the baselines that size inference on what they observe (reactive,
kueue-hpa) give each service the GPUs it holds in a pool as its allowance there, borrowed by the
preemptible jobs they run in it (simulator/policies/common.burst_headroom); policies that lend
nothing (fifo and priority-backfill, on a static peak reservation) are not affected.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from schemas import Allocation, JobStatus
from simulator.jobs import LiveJob

if TYPE_CHECKING:
    from simulator.cluster import Simulator


class BurstAutoscaler:
    def __init__(self) -> None:
        self.allowance: dict[str, dict[str, float]] = {}  # service -> pool -> GPUs left to add
        self.borrowers: dict[str, tuple[str, str]] = {}  # job id -> (service, pool)

    def apply(self, allocation: Allocation) -> None:
        """The allowances and borrowers of the step just decided (replacing the last step's)."""
        self.allowance = {}
        for d in allocation.services:
            if d.burst_gpus > 0:
                self.allowance.setdefault(d.service, {})[d.pool] = d.burst_gpus
        self.borrowers = {
            d.job_id: (d.borrows_from, d.pool)
            for d in allocation.jobs
            if d.borrows_from is not None and d.pool is not None
        }

    def react(self, sim: Simulator, t_s: float) -> None:
        """Scale up every service whose demand now exceeds its capacity, within its allowance."""
        for service, by_pool in self.allowance.items():
            spec = sim.specs.get(service)
            if spec is None:
                continue
            capacity = sim.capacity.get(service, {})
            have = sum(c.footprint * c.efficiency for c in capacity.values())
            short = sim.demand_at(service, t_s) - have
            per = spec.gpus_per_replica
            for pool, left in sorted(by_pool.items()):
                if short <= 1e-9:
                    break
                take = min(math.ceil(short / per - 1e-9), math.floor(left / per + 1e-9)) * per
                if take <= 0:
                    continue
                take = min(take, self._make_room(sim, service, pool, take, t_s) // per * per)
                if take <= 0:
                    continue
                targets = sim.current_targets()
                targets[pool][service] = targets[pool].get(service, 0.0) + take
                sim.fit_services(targets, t_s)
                by_pool[pool] = left - take
                short -= take

    def _make_room(self, sim: Simulator, service: str, pool: str, gpus: int, t_s: float) -> int:
        """Free GPUs in ``pool`` for ``gpus`` more, preempting this service's borrowers as needed;
        returns the GPUs now free for it."""
        free = sum(sim.job_free_by_node(t_s)[pool]) - sim.service_phys[pool]
        victims = sorted(
            (
                job
                for job_id, (lender, where) in self.borrowers.items()
                if lender == service
                and where == pool
                and (job := sim.jobs.get(job_id)) is not None
                and job.status == JobStatus.RUNNING
                and job.pool == pool
            ),
            key=LiveJob.cheapest_stop_first,
        )
        for job in victims:
            if free >= gpus:
                break
            sim.stop_job(job, "burst")
            del self.borrowers[job.job_id]
            free += job.spec.gpus
        return max(free, 0)

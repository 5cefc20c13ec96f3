"""The last check of a decision before it is published: no service under its minimum, no pool over-committed.

Place in a decision: after the plan is assembled (optimizer/plan_build.py), in
``PlannerPolicy.decide`` (optimizer/planner.py). The model keeps ``min_replicas`` soft (a large
penalty) and a solver can answer with something unusable, so the allocation that actuators apply
is checked here: a solved plan that breaks a rule is replaced by the flagged fallback, with the
broken rule in its reason. Pure: records in, readable violations out.
"""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import datetime, timedelta

from schemas import Allocation, ClusterState, JobAction, JobStatus, PoolState


def pool_limit(pool: PoolState, now: datetime, seconds: int) -> int:
    """GPUs a plan may use in the pool all through ``seconds`` from ``now``: available, less the
    GPUs of the largest window open then."""
    end = now + timedelta(seconds=seconds)
    out = max((w.gpus_out for w in pool.windows if w.start < end and w.end > now), default=0)
    return max(min(pool.gpus_available, pool.gpus_total - out), 0)


def violations(state: ClusterState, allocation: Allocation, now: datetime, horizon_s: int = 0) -> list[str]:
    """What in ``allocation`` breaks a rule no plan may break; empty when it is safe to publish.

    A service under its minimum is a violation while its pools still have room for one more of its
    replicas next to every service's planned GPUs and the running jobs no plan may preempt, all
    through the plan's horizon (``horizon_s``; beyond that no plan can give it)."""
    pools = {p.name: p for p in state.pools}
    limits = {name: pool_limit(p, now, state.step_s) for name, p in pools.items()}
    lasting = {name: pool_limit(p, now, max(horizon_s, state.step_s)) for name, p in pools.items()}
    service_gpus: dict[str, float] = defaultdict(float)
    replicas: dict[str, int] = defaultdict(int)
    for svc in allocation.services:
        service_gpus[svc.pool] += svc.gpus
        replicas[svc.service] += svc.replicas
    job_gpus: dict[str, int] = defaultdict(int)
    for decision in allocation.jobs:
        if decision.action == JobAction.RUN and decision.pool is not None:
            job_gpus[decision.pool] += decision.gpus
    found = []
    for name in sorted(set(service_gpus) | set(job_gpus)):
        used = math.ceil(service_gpus[name] - 1e-6) + job_gpus[name]
        if name not in limits:
            found.append(f"pool {name} is not in the cluster")
        elif used > limits[name]:
            found.append(f"pool {name} over-committed: {used} GPUs planned, {limits[name]} usable")
    pinned: dict[str, int] = defaultdict(int)  # GPUs of running jobs no plan may preempt
    for job in state.jobs:
        if job.status == JobStatus.RUNNING and not job.spec.preemptible and job.pool is not None:
            pinned[job.pool] += job.spec.gpus
    for service in state.services:
        spec = service.spec
        if replicas[spec.service] >= spec.min_replicas:
            continue
        pools_allowed = [n for n in (spec.allowed_pools or list(limits)) if n in limits]
        # Room the plan left in the service's pools, after every service's GPUs and the jobs no plan
        # may preempt: services share it, so a minimum the pools cannot hold next to the others'
        # is no violation, but a replica that still fits (batch kept in its place) is.
        room_left = sum(
            max(lasting[n] - pinned[n] - math.ceil(service_gpus[n] - 1e-6), 0) for n in pools_allowed
        )
        if room_left >= spec.gpus_per_replica:
            found.append(
                f"service {spec.service} planned at {replicas[spec.service]} replicas, "
                f"under its min_replicas {spec.min_replicas}"
            )
    return found

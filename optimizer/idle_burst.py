"""Burst into idle GPUs (pipeline stage 7, after lending headroom, optimizer/headroom.py): a service
may scale up within the step into the GPUs step 0 leaves idle in its pool.

A plan sizes each service for its forecast; where demand outruns it inside the step (a level
shift no history showed, a burst) the service's autoscaler can add replicas at once only up to its
``burst_gpus`` ceiling. Lending sets that ceiling to what it lent; GPUs that neither a service nor
a job holds in step 0 are free for the autoscaler too, at no cost to any job, so they are added to
the ceiling of every service in that pool, in whole replicas of each: whichever bursts first takes
them (the simulated autoscaler takes free GPUs before it stops any borrower and never takes another
service's, simulator/autoscaler.py). The ceilings together may exceed the idle GPUs: on Kubernetes a
second service bursting in the same step gets replicas the free GPUs cannot hold, which preempt
batch pods (inference outranks batch, deploy/rbac/priorityclasses.yaml) until the next plan sizes
both. Giving the idle GPUs to the largest service only left a bursting small service short beside
a large quiet one: the many-services workload's moderation bursts went 10 times as short as under
kueue-hpa, whose every service may double.
Pure: a function of the decision and the cluster state.
"""

from __future__ import annotations

import math
from collections import defaultdict

from loop import Decision
from optimizer.plan_build import rewrite_step0
from schemas import ClusterState, JobAction, ServiceDecision


def idle_gpus(decision: Decision, state: ClusterState) -> dict[str, int]:
    """Pool -> whole GPUs step 0 leaves idle: available, less services (with their burst ceilings)
    and the jobs that run there and do not borrow (borrowers run inside a ceiling)."""
    allocation = decision.allocation
    held: dict[str, float] = defaultdict(float)
    for s in allocation.services:
        held[s.pool] += s.gpus + s.burst_gpus
    for j in allocation.jobs:
        if j.action == JobAction.RUN and j.pool is not None and j.borrows_from is None:
            held[j.pool] += j.gpus
    return {p.name: max(math.floor(p.gpus_available - held[p.name] + 1e-9), 0) for p in state.pools}


def burst_into_idle(decision: Decision, state: ClusterState) -> Decision:
    """The decision with each pool's idle GPUs added to the burst ceiling of every service there."""
    allocation = decision.allocation
    if allocation.fallback or not allocation.services:
        return decision
    idle = idle_gpus(decision, state)
    per_replica = {s.spec.service: s.spec.gpus_per_replica for s in state.services}
    added: dict[tuple[str, str], float] = {}
    for s in allocation.services:
        per = per_replica.get(s.service, 1)
        extra = idle.get(s.pool, 0) // per * per
        if s.replicas > 0 and extra > 0:
            added[(s.service, s.pool)] = float(extra)
    if not added:
        return decision
    sharers: dict[str, list[str]] = defaultdict(list)
    for service, pool in added:
        sharers[pool].append(service)
    services = [
        _with_burst(s, added.get((s.service, s.pool), 0.0), sharers[s.pool]) for s in allocation.services
    ]
    first = decision.plan.blocks[0]
    step0_services = [
        c.revised(burst_gpus=c.burst_gpus + added.get((c.service, c.pool), 0.0)) for c in first.services
    ]
    return rewrite_step0(
        decision,
        step0_services=step0_services,
        step0_jobs=list(first.jobs),
        services=services,
        jobs=list(allocation.jobs),
    )


def _with_burst(s: ServiceDecision, extra: float, sharers: list[str]) -> ServiceDecision:
    if extra <= 0:
        return s
    reason = (
        f"{s.reason}; its autoscaler may add up to {extra:g} GPUs left idle in pool {s.pool} within the step"
    )
    others = sorted(name for name in sharers if name != s.service)
    if others:
        reason += f" (shared with {', '.join(others)}: the first to need them takes them)"
    return s.revised(burst_gpus=s.burst_gpus + extra, reason=reason)

"""Shared bookkeeping of the baseline policies: free GPUs per pool, placement, Decision records.

Baselines plan one step: their HorizonPlan has a single step equal to the Allocation, and every
service and job decision carries a reason a person can read. Pure: decisions depend only on the
state, the forecasts and ``now``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta

from loop import Decision, config_fingerprint, inputs_digest, plan_id_for
from optimizer.nodes import place_gang, reserve_packed
from schemas import (
    Allocation,
    ClusterState,
    DemandForecast,
    HorizonPlan,
    JobAction,
    JobDecision,
    JobPlacement,
    JobSpec,
    JobState,
    JobStatus,
    PlanBlock,
    ServiceCapacity,
    ServiceDecision,
    ServiceState,
    SolverInfo,
)


class PoolBook:
    """GPUs each pool has left this step, as far as the policy can tell from the state.

    Where the state reports free GPUs per node (PoolState.free_gpus_by_node), gang fits are
    checked per node the way the cluster places them (inference packed onto the fullest nodes,
    gangs best-fit); otherwise only pool totals are known.
    """

    def __init__(self, state: ClusterState) -> None:
        self.gpu_type = {p.name: p.gpu_type for p in state.pools}
        self.free = {p.name: float(p.gpus_available) for p in state.pools}
        self.order = [p.name for p in state.pools]
        self.gpus_per_node = {p.name: p.gpus_per_node for p in state.pools}
        self.nodes: dict[str, list[int] | None] = {
            p.name: list(p.free_gpus_by_node) if p.free_gpus_by_node else None for p in state.pools
        }
        for job in state.jobs:
            if job.status == JobStatus.RUNNING and job.pool in self.free:
                self.free[job.pool] -= job.spec.gpus

    def _nodes_without(self, pool: str, exclude: frozenset[int]) -> list[int] | None:
        nodes = self.nodes[pool]
        if nodes is None:
            return None
        return [0 if i in exclude else f for i, f in enumerate(nodes)]

    def fits(self, pool: str, gpus: int, exclude: frozenset[int] = frozenset()) -> bool:
        """Whether a gang fits now (per node when known), keeping off the ``exclude`` nodes."""
        if self.free[pool] < gpus:
            return False
        nodes = self._nodes_without(pool, exclude)
        return nodes is None or place_gang(nodes, gpus, self.gpus_per_node[pool]) is not None

    def take_job(self, pool: str, gpus: int, exclude: frozenset[int] = frozenset()) -> None:
        self.free[pool] -= gpus
        nodes = self.nodes[pool]
        masked = self._nodes_without(pool, exclude)
        placement = None if masked is None else place_gang(masked, gpus, self.gpus_per_node[pool])
        if nodes is not None and placement is not None:
            for node, used in placement.items():
                nodes[node] -= used

    def take_service(self, pool: str, gpus: int) -> None:
        self.free[pool] -= gpus
        nodes = self.nodes[pool]
        if nodes is not None:
            self.nodes[pool] = reserve_packed(nodes, gpus)

    def release(self, pool: str, gpus: int) -> None:
        """GPUs a preempted job gives back; which node they are on is unknown, so drop node detail."""
        self.free[pool] += gpus
        self.nodes[pool] = None

    def allowed(self, spec: JobSpec) -> list[str]:
        return [
            p
            for p in self.order
            if (not spec.allowed_pools or p in spec.allowed_pools)
            and (not spec.allowed_gpu_types or self.gpu_type[p] in spec.allowed_gpu_types)
        ]

    def first_fit(self, spec: JobSpec) -> str | None:
        for pool in self.allowed(spec):
            if self.fits(pool, spec.gpus):
                return pool
        return None

    def service_pools(self, service: ServiceState) -> list[str]:
        allowed = service.spec.allowed_pools or self.order
        current = [p for p in allowed if service.replicas.get(p, 0) > 0]
        return current + [p for p in allowed if p not in current]


def reserve_service(
    book: PoolBook, service: ServiceState, gpus: float, reason: str
) -> tuple[list[ServiceDecision], float]:
    """Place ``gpus`` (whole replicas) of a service in its pools; return decisions and the shortfall."""
    per = service.spec.gpus_per_replica
    want = math.ceil(max(gpus, 0.0) / per - 1e-9) * per
    decisions: list[ServiceDecision] = []
    for pool in book.service_pools(service):
        room = math.floor(max(book.free[pool], 0.0) / per) * per
        take = min(want, room)
        if take > 0:
            book.take_service(pool, take)
            want -= take
            decisions.append(
                ServiceDecision(
                    service=service.spec.service,
                    pool=pool,
                    replicas=take // per,
                    gpus=float(take),
                    reason=reason,
                )
            )
        if want <= 0:
            break
    if not decisions:
        pool = book.service_pools(service)[0]
        decisions.append(
            ServiceDecision(
                service=service.spec.service,
                pool=pool,
                replicas=0,
                gpus=0.0,
                reason=f"{reason}; no GPUs free",
            )
        )
    return decisions, float(want)


def run(job: JobState, pool: str, reason: str) -> JobDecision:
    return JobDecision(
        job_id=job.spec.job_id, action=JobAction.RUN, pool=pool, gpus=job.spec.gpus, reason=reason
    )


def hold(job: JobState, reason: str) -> JobDecision:
    return JobDecision(job_id=job.spec.job_id, action=JobAction.HOLD, reason=reason)


def preempt(job: JobState, reason: str) -> JobDecision:
    return JobDecision(job_id=job.spec.job_id, action=JobAction.PREEMPT, reason=reason)


def age_s(job: JobState, now: datetime) -> float:
    return max((now - job.submitted_at).total_seconds(), 0.0)


def decision(
    policy: str,
    state: ClusterState,
    forecasts: Mapping[str, DemandForecast],
    now: datetime,
    services: Iterable[ServiceDecision],
    jobs: Iterable[JobDecision],
    settings: object,
) -> Decision:
    """A one-step HorizonPlan and the matching Allocation, with a deterministic plan id."""
    services = list(services)
    jobs = list(jobs)
    digest = inputs_digest(state, forecasts, now, config_fingerprint(settings))
    plan_id = plan_id_for(state.cluster, policy, digest)
    block = PlanBlock(
        first_step=0,
        steps=1,
        services=[
            ServiceCapacity(service=s.service, pool=s.pool, replicas=s.replicas, gpus=s.gpus)
            for s in services
        ],
        jobs=[
            JobPlacement(job_id=j.job_id, pool=j.pool, gpus=j.gpus)
            for j in jobs
            if j.action == JobAction.RUN and j.pool is not None
        ],
    )
    plan = HorizonPlan(
        cluster=state.cluster,
        plan_id=plan_id,
        policy=policy,
        issued_at=now,
        step_s=state.step_s,
        horizon_steps=1,
        blocks=[block],
        solver=SolverInfo(solver="greedy", status="ok", time_ms=0.0),
        inputs_digest=digest,
    )
    allocation = Allocation(
        cluster=state.cluster,
        plan_id=plan_id,
        policy=policy,
        issued_at=now,
        step_s=state.step_s,
        valid_until=now + timedelta(seconds=state.step_s),
        services=services,
        jobs=jobs,
    )
    return Decision(plan=plan, allocation=allocation)


HPA_TARGET_UTILIZATION = 0.7
"""Target utilization of a replica's capacity for the baselines that size inference on what they
observe (a common HPA setting); reactive's headroom is the same, 1 / 0.7 - 1 above demand."""


def serve_services(
    book: PoolBook,
    state: ClusterState,
    want_of: Callable[[ServiceState], tuple[float, str]],
) -> tuple[list[ServiceDecision], dict[str, JobDecision]]:
    """Size every service to ``want_of(service)`` (GPUs, reason), preempting running preemptible
    jobs in its pools when it does not fit (lowest weight first, then the least work since its
    last checkpoint: inference pods outrank batch, as Kubernetes priority classes do)."""
    running = [j for j in state.jobs if j.status == JobStatus.RUNNING and j.pool is not None]
    victims = sorted(
        (j for j in running if j.spec.preemptible),
        key=lambda j: (j.spec.priority_weight, j.since_checkpoint_gpu_s, j.spec.job_id),
    )
    preempted: dict[str, JobDecision] = {}
    services: list[ServiceDecision] = []
    for svc in state.services:
        want, reason = want_of(svc)
        per = svc.spec.gpus_per_replica
        short = want - sum(math.floor(max(book.free[p], 0.0) / per) * per for p in book.service_pools(svc))
        for victim in victims:
            if short <= 0:
                break
            if victim.spec.job_id in preempted or victim.pool not in book.service_pools(svc):
                continue
            why = f"{svc.spec.service} needs {want:.0f} GPUs ({reason}); lowest weight on {victim.pool}"
            preempted[victim.spec.job_id] = preempt(victim, why)
            assert victim.pool is not None
            book.release(victim.pool, victim.spec.gpus)
            short -= victim.spec.gpus
        made, _ = reserve_service(book, svc, want, reason)
        services.extend(made)
    return services, preempted


def burst_headroom(
    services: list[ServiceDecision], jobs: list[JobDecision], state: ClusterState
) -> tuple[list[ServiceDecision], list[JobDecision]]:
    """The in-step autoscaler's allowance for a policy that sizes inference on what it observes:
    each service may add, within the step, up to the GPUs it was given in a pool (an HPA scales up
    between decisions; Kubernetes' default scale-up policy at least doubles in far less than a
    step), preempting the preemptible jobs run in that pool, which borrow from the service with the
    most GPUs there (simulator/autoscaler.py). The same rule for every baseline that uses it."""
    preemptible = {j.spec.job_id for j in state.jobs if j.spec.preemptible}
    lender: dict[str, tuple[float, str]] = {}
    burst: list[ServiceDecision] = []
    for d in services:
        if d.gpus > 0 and d.replicas > 0:
            d = d.model_copy(update={"burst_gpus": float(d.gpus)})
            lender[d.pool] = max(lender.get(d.pool, (0.0, "")), (d.gpus, d.service))
        burst.append(d)
    lent = [
        j.model_copy(update={"borrows_from": lender[j.pool][1]})
        if j.action == JobAction.RUN and j.pool in lender and j.job_id in preemptible
        else j
        for j in jobs
    ]
    return burst, lent

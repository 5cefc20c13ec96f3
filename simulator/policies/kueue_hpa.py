"""The ``kueue-hpa`` baseline: what a Kubernetes team runs today, HPA for inference, Kueue for batch.

Inference, as the HorizontalPodAutoscaler: desired replicas = ceil(replicas x utilization /
target), utilization being observed demand over the replicas' capacity (target 0.7 of a
replica); within the tolerance (0.1) nothing changes; scale-up is immediate, scale-down follows
the highest recommendation of the stabilization window (5 minutes, Kubernetes' default), read
from the demand history; never below the service's minimum. New replicas serve after their
start-up time (the simulator's physics; the HPA does not anticipate it), and between decisions
the in-step autoscaler scales up on a burst over the same rule as reactive's
(common.burst_headroom).

Batch, as Kueue: a ClusterQueue per team with a nominal quota (ClusterState.quotas_gpus; where
none is given, the GPUs inference leaves split evenly over the teams with work), all in one cohort,
so a queue may borrow what the others leave unused. BestEffortFIFO: pending workloads by
priority, then age; one that does not fit does not block those behind it. A workload that cannot
fit preempts, in its own queue, running workloads of lower priority, and reclaims GPUs other
queues borrow beyond their nominal quota when its own queue is within its quota (Kueue's
withinClusterQueue: LowerPriority and reclaimWithinCohort: Any), only if that makes it fit;
candidates from other queues first, then the lowest priority, then the most recently started.
No forecast. Pure: decisions depend only on the state and ``now``.
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
    preempt,
    run,
    serve_services,
)


@dataclass(frozen=True)
class KueueHpaSettings:
    target_utilization: float = HPA_TARGET_UTILIZATION
    tolerance: float = 0.1
    scale_down_stabilization_s: float = 300.0
    burst: bool = True


def hpa_replicas(svc: ServiceState, step_s: int, settings: KueueHpaSettings) -> tuple[int, str]:
    """The HPA's desired replicas for a service and why."""
    per = svc.spec.gpus_per_replica
    current = sum(svc.replicas.values())
    history = svc.demand_history or [0.0]
    window = max(1, math.ceil(settings.scale_down_stabilization_s / step_s))

    def recommend(demand: float) -> int:
        if current > 0:
            ratio = demand / (current * per) / settings.target_utilization
            if abs(ratio - 1.0) <= settings.tolerance:
                return current
        return math.ceil(demand / (per * settings.target_utilization) - 1e-9)

    now = recommend(history[-1])
    desired = now if now >= current else min(current, max(recommend(d) for d in history[-window:]))
    desired = max(desired, svc.spec.min_replicas)
    return desired, f"HPA: demand {history[-1]:.1f} GPUs at target {settings.target_utilization:.0%}"


class _Queues:
    """The cohort's ClusterQueues: nominal quota and GPUs in use per team."""

    def __init__(self, state: ClusterState, book: PoolBook, running: list[JobState]) -> None:
        teams = sorted({j.spec.team for j in state.jobs} | set(state.quotas_gpus))
        batch_gpus = sum(max(f, 0.0) for f in book.free.values()) + sum(j.spec.gpus for j in running)
        even = batch_gpus / max(len(teams), 1)
        quotas = state.quotas_gpus
        self.nominal = {t: float(quotas.get(t, 0)) if quotas else even for t in teams}
        self.usage = dict.fromkeys(teams, 0.0)
        for job in running:
            self.usage[job.spec.team] += job.spec.gpus

    def admits(self, team: str, gpus: int, usage: Mapping[str, float] | None = None) -> bool:
        """Whether ``gpus`` more fit the team's nominal quota plus what the cohort leaves unused."""
        usage = self.usage if usage is None else usage
        over = usage[team] + gpus - self.nominal[team]
        unused = sum(max(self.nominal[t] - usage[t], 0.0) for t in self.nominal if t != team)
        return over <= 1e-9 or over <= unused + 1e-9

    def borrowing(self, team: str) -> bool:
        return self.usage[team] > self.nominal[team] + 1e-9


def _candidates(job: JobState, pool: str, running: list[JobState], queues: _Queues) -> list[JobState]:
    """Who Kueue may preempt for ``job`` on ``pool``, in its order (other queues, lowest priority,
    newest first)."""
    team, weight = job.spec.team, job.spec.priority_weight
    within_quota = queues.usage[team] + job.spec.gpus <= queues.nominal[team] + 1e-9
    found = [
        r
        for r in running
        if r.pool == pool
        and r.spec.preemptible
        and (
            (r.spec.team == team and r.spec.priority_weight < weight)
            or (r.spec.team != team and within_quota and queues.borrowing(r.spec.team))
        )
    ]
    return sorted(
        found,
        key=lambda r: (
            r.spec.team == team,
            r.spec.priority_weight,
            -(r.started_at or r.submitted_at).timestamp(),
        ),
    )


class KueueHpaPolicy:
    def __init__(self, name: str = "kueue-hpa", settings: KueueHpaSettings | None = None) -> None:
        self.name = name
        self.settings = settings or KueueHpaSettings()

    def decide(self, state: ClusterState, forecasts: Mapping[str, DemandForecast], now: datetime) -> Decision:
        book = PoolBook(state)

        def want(svc: ServiceState) -> tuple[float, str]:
            replicas, why = hpa_replicas(svc, state.step_s, self.settings)
            return float(replicas * svc.spec.gpus_per_replica), why

        services, preempted = serve_services(book, state, want)
        running = [
            j
            for j in state.jobs
            if j.status == JobStatus.RUNNING and j.pool is not None and j.spec.job_id not in preempted
        ]
        queues = _Queues(state, book, running)
        jobs = self._admit(state, book, queues, running, preempted)
        if self.settings.burst:
            services, jobs = burst_headroom(services, jobs, state)
        return decision(self.name, state, forecasts, now, services, jobs, self.settings)

    def _admit(
        self,
        state: ClusterState,
        book: PoolBook,
        queues: _Queues,
        running: list[JobState],
        preempted: dict[str, JobDecision],
    ) -> list[JobDecision]:
        """BestEffortFIFO admission by priority then age, with Kueue's preemption. Only workloads
        running before this step are preemption candidates."""
        pending = [j for j in state.jobs if j.status == JobStatus.QUEUED]
        pending.sort(key=lambda j: (-j.spec.priority_weight, j.submitted_at, j.spec.job_id))
        admitted: list[JobDecision] = []
        for job in pending:
            team, gpus = job.spec.team, job.spec.gpus
            pool = book.first_fit(job.spec) if queues.admits(team, gpus) else None
            if pool is None:
                pool = _preempt_for(job, book, queues, running, preempted)
            if pool is None:
                admitted.append(hold(job, f"queue {team}: {gpus} GPUs do not fit within quota and cohort"))
                continue
            book.take_job(pool, gpus)
            queues.usage[team] += gpus
            why = f"queue {team}: admitted on {pool} (priority {job.spec.priority_weight:g})"
            admitted.append(run(job, pool, why))
        kept = [
            run(j, j.pool, f"queue {j.spec.team}: admitted, running")
            for j in running
            if j.pool is not None and j.spec.job_id not in preempted
        ]
        return [*preempted.values(), *kept, *admitted]


def _preempt_for(
    job: JobState,
    book: PoolBook,
    queues: _Queues,
    running: list[JobState],
    preempted: dict[str, JobDecision],
) -> str | None:
    """Preempt the fewest candidates (in Kueue's order) that make ``job`` fit on one of its pools,
    within quota; return that pool, or None (and preempt nobody) when no choice makes it fit."""
    team, gpus = job.spec.team, job.spec.gpus
    for pool in book.allowed(job.spec):
        chosen: list[JobState] = []
        free, usage = book.free[pool], dict(queues.usage)
        for victim in _candidates(job, pool, running, queues):
            if free >= gpus and queues.admits(team, gpus, usage):
                break
            chosen.append(victim)
            free += victim.spec.gpus
            usage[victim.spec.team] -= victim.spec.gpus
        if not chosen or free < gpus or not queues.admits(team, gpus, usage):
            continue
        for victim in chosen:
            why = f"Kueue: preempted for {job.spec.job_id} (priority {job.spec.priority_weight:g})"
            preempted[victim.spec.job_id] = preempt(victim, why)
            book.release(pool, victim.spec.gpus)
            queues.usage[victim.spec.team] -= victim.spec.gpus
            running.remove(victim)
        return pool
    return None

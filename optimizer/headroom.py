"""Lend headroom (pipeline stage 7, the last): step 0's reserved-but-idle inference capacity runs
preemptible batch.

The plan reserves each service's capacity at its SLO quantile. Between what the service needs now
(the larger of its last observed demand and its median forecast for the next steps) and that
reservation lies headroom that is idle unless the demand bursts. After the plan is made, this
module lends that headroom, in step 0 only, to preemptible batch jobs whose restart costs less than
a step (what they lose when it is taken back ran on GPUs that would otherwise idle). Jobs the plan
was about to preempt are kept running on it first (the pool's count is the same: the headroom is
what the service gives up), then waiting jobs by weight; but not a job stopped to empty a node for
a gang, whose node is spoken for (business-hours, seed 31: one kept on a service's headroom left a
16-GPU gang no node). Each such job carries ``borrows_from``; the service carries ``burst_gpus``,
the GPUs its autoscaler may take back within the step, preempting its borrowers (on Kubernetes: a
horizontal autoscaler over priority-class preemption). A service keeps the plan's capacity minus
only what is actually lent, so with nothing to lend nothing changes.

Pure: a function of the decision, the cluster state and the (level-corrected) forecasts. Pools
that time-slice GPUs are not lent from (fractional capacity has no whole replicas to take back).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from loop import Decision
from optimizer.peak_margin import peak_margin_gpus
from optimizer.plan_build import rewrite_step0
from schemas import (
    ClusterState,
    DecisionCause,
    DemandForecast,
    JobAction,
    JobDecision,
    JobPlacement,
    JobState,
    JobStatus,
    PoolState,
    ServiceDecision,
    ServiceState,
)

_MEDIAN_STEPS = 2  # steps of median forecast the kept capacity covers (a replica loads within one)
_BORROWER_ACTIONS = frozenset({JobAction.PREEMPT, JobAction.HOLD})  # the plan's actions for borrowers


@dataclass
class _Lendable:
    service: str
    pool: str
    per_replica: int
    planned_gpus: float
    need_gpus: float  # capacity the service keeps for its demand now
    lent_gpus: int = 0

    @property
    def free_gpus(self) -> float:
        return self.planned_gpus - self.need_gpus - self.lent_gpus


def kept_need_gpus(
    service: ServiceState, forecast: DemandForecast | None, step_s: int, margin_gpus: float = 0.0
) -> float | None:
    """GPUs a service keeps for the demand it has now: max(last observed, median of the next
    steps) plus ``margin_gpus`` (what it keeps ready for a rise within the step,
    optimizer/peak_margin.py), whole replicas, at least min_replicas. None: no forecast at this
    step size."""
    if forecast is None or forecast.step_s != step_s or "p50" not in forecast.quantiles:
        return None
    spec = service.spec
    per = spec.gpus_per_replica
    observed = service.demand_history[-1] if service.demand_history else 0.0
    median = max(forecast.curve("p50")[:_MEDIAN_STEPS], default=0.0)
    need = math.ceil((max(observed, median) + margin_gpus) / per - 1e-9) * per
    return float(max(need, spec.min_replicas * per))


@dataclass(frozen=True)
class Kept:
    """What a service kept (did not lend) at the last decision, over all its pools."""

    gpus: float
    replicas: int


def kept_by_service(decisions: list[ServiceDecision]) -> dict[str, Kept]:
    """Each service's GPUs and replicas in a decision (what it kept: lent GPUs are not in them)."""
    gpus: dict[str, float] = defaultdict(float)
    replicas: dict[str, int] = defaultdict(int)
    for d in decisions:
        gpus[d.service] += d.gpus
        replicas[d.service] += d.replicas
    return {name: Kept(gpus[name], replicas[name]) for name in gpus}


def taken_back_gpus(service: ServiceState, kept: Kept | None) -> float | None:
    """The GPUs a service runs now when its autoscaler added replicas since the last decision
    (took lent or idle GPUs back within that step): what it kept plus the added replicas' GPUs;
    None when it added none. Replicas are compared with replicas: in a pool that time-slices, a
    replica holds a share of a GPU, so replicas x GPUs per replica overstate the GPUs a service
    runs there (and a fractional share reads as one more replica than it was given); compared
    with the GPUs it kept, that read as a scale-up at every step and ratcheted the plan's floor
    for the service up by a few GPUs a step."""
    if kept is None:
        return None
    added = sum(service.replicas.values()) - kept.replicas
    if added <= 0:
        return None
    return kept.gpus + added * service.spec.gpus_per_replica


def can_borrow(job: JobState, step_s: int) -> bool:
    """Preemptible, and a restart costs it less than one step. Work it loses when the headroom is
    taken back was done on GPUs that would otherwise have idled; the autoscaler takes the jobs
    that lose least first."""
    spec = job.spec
    return spec.preemptible and spec.restart_cost_s <= step_s


def _pool_allows(pool: PoolState, job: JobState) -> bool:
    spec = job.spec
    if spec.allowed_pools and pool.name not in spec.allowed_pools:
        return False
    if spec.allowed_gpu_types and pool.gpu_type not in spec.allowed_gpu_types:
        return False
    return pool.gpus_per_node is None or spec.gpus <= pool.gpus_per_node


def lend_headroom(
    decision: Decision,
    state: ClusterState,
    forecasts: Mapping[str, DemandForecast],
    margin_z: float | None = None,
    kept_before: Mapping[str, Kept] | None = None,
    held_nodes: Mapping[str, Mapping[str, float]] | None = None,
) -> Decision:
    """The decision with step 0's idle headroom lent to borrowers (unchanged if none qualify).
    ``margin_z``: each service keeps ready, beyond its demand now, the move its demand makes before
    the next decision at this many robust standard deviations (PlannerConfig.peak_margin_z,
    optimizer/peak_margin.py), rather than lend it; None: it keeps only its demand now.
    ``kept_before``: the GPUs each service kept (did not lend) in the last decision; a service
    running more now took lent GPUs back within that step, and keeps them rather than lend them
    again at once (its demand rose past what it kept). ``held_nodes``: per pool, the nodes step 0
    holds for gangs as they drain, with each gang's weight; a borrower started now keeps off those
    held for heavier work (``JobDecision.avoid_nodes``), as step 0's own starts do."""
    allocation = decision.allocation
    if allocation.fallback:
        return decision
    if not any(d.action in _BORROWER_ACTIONS for d in allocation.jobs):
        return decision  # only jobs the plan holds or preempts borrow (see _choose_borrowers)
    step_s = state.step_s
    pools = {p.name: p for p in state.pools}
    services = {s.spec.service: s for s in state.services}
    lendable = _lendable(allocation.services, pools, services, forecasts, step_s, margin_z, kept_before or {})
    if not lendable:
        return decision
    jobs = {j.spec.job_id: j for j in state.jobs}
    borrowers = _choose_borrowers(allocation.jobs, jobs, pools, lendable, state.quotas_gpus, step_s)
    if not borrowers:
        return decision
    return _rewrite(decision, lendable, borrowers, jobs, held_nodes or {})


def _lendable(
    decisions: list[ServiceDecision],
    pools: Mapping[str, PoolState],
    services: Mapping[str, ServiceState],
    forecasts: Mapping[str, DemandForecast],
    step_s: int,
    margin_z: float | None,
    kept_before: Mapping[str, Kept],
) -> dict[tuple[str, str], _Lendable]:
    by_service: dict[str, list[ServiceDecision]] = defaultdict(list)
    for d in decisions:
        by_service[d.service].append(d)
    out: dict[tuple[str, str], _Lendable] = {}
    for name, planned in sorted(by_service.items()):
        service = services.get(name)
        if service is None:
            continue
        margin = 0.0
        if margin_z is not None:
            margin = peak_margin_gpus(service.demand_history, margin_z, service.spec.startup_s, step_s)
        need = kept_need_gpus(service, forecasts.get(name), step_s, margin)
        if need is None:
            continue
        per = service.spec.gpus_per_replica
        taken_back = taken_back_gpus(service, kept_before.get(name))
        if taken_back is not None:
            need = max(need, taken_back)  # taken back within the last step: not lent again yet
        # the need is kept in the pools the plan gives most (deterministic: then by pool name)
        for d in sorted(planned, key=lambda d: (-d.gpus, d.pool)):
            pool = pools.get(d.pool)
            whole = abs(d.gpus - d.replicas * per) < 1e-9
            keep = min(d.gpus, max(need, 0.0))
            need -= keep
            if pool is None or pool.max_share > 1 or not whole or d.gpus - keep < 1:
                continue
            out[(name, d.pool)] = _Lendable(name, d.pool, per, d.gpus, keep)
    return out


def _choose_borrowers(
    decisions: list[JobDecision],
    jobs: Mapping[str, JobState],
    pools: Mapping[str, PoolState],
    lendable: dict[tuple[str, str], _Lendable],
    quotas: Mapping[str, int],
    step_s: int,
) -> dict[str, _Lendable]:
    team_gpus: dict[str, int] = defaultdict(int)
    for d in decisions:
        job = jobs.get(d.job_id)
        if job is not None and d.action == JobAction.RUN:
            team_gpus[job.spec.team] += d.gpus
    kept: list[tuple[JobState, str | None]] = []  # preempted by the plan: stay where they run
    waiting: list[tuple[JobState, str | None]] = []  # None: any pool that allows the job
    for d in decisions:
        job = jobs.get(d.job_id)
        if job is None or not can_borrow(job, step_s):
            continue
        running_in = job.pool if job.status == JobStatus.RUNNING else None
        stopped = d.action == JobAction.PREEMPT and d.cause != DecisionCause.CLEARED_FOR_JOB
        if stopped and running_in in pools:
            kept.append((job, running_in))
        elif d.action == JobAction.HOLD and job.status == JobStatus.QUEUED:
            waiting.append((job, None))
    waiting.sort(key=lambda item: (-item[0].spec.priority_weight, item[0].submitted_at, item[0].spec.job_id))
    chosen: dict[str, _Lendable] = {}
    for job, only_pool in kept + waiting:
        spec = job.spec
        quota = quotas.get(spec.team)
        if quota is not None and team_gpus[spec.team] + spec.gpus > quota:
            continue
        # every lendable pool is one of the state's pools (see _lendable)
        offers = [
            h
            for h in lendable.values()
            if h.free_gpus >= spec.gpus - 1e-9
            and (h.pool == only_pool if only_pool is not None else _pool_allows(pools[h.pool], job))
        ]
        if not offers:
            continue
        best = max(offers, key=lambda h: (h.free_gpus, h.service, h.pool))
        best.lent_gpus += spec.gpus
        team_gpus[spec.team] += spec.gpus
        chosen[spec.job_id] = best
    return chosen


_Given = dict[tuple[str, str], tuple[float, int, float]]
"""(service, pool) -> the GPUs and replicas it runs now, and the GPUs lent (its burst ceiling)."""


def _rewrite(
    decision: Decision,
    lendable: dict[tuple[str, str], _Lendable],
    borrowers: dict[str, _Lendable],
    jobs: Mapping[str, JobState],
    held_nodes: Mapping[str, Mapping[str, float]],
) -> Decision:
    allocation, plan = decision.allocation, decision.plan
    services, given = _lending_services(allocation.services, lendable)
    step0 = plan.blocks[0]
    step0_services = []
    for c in step0.services:
        change = given.get((c.service, c.pool))
        if change is not None:
            c = c.revised(gpus=change[0], replicas=change[1], burst_gpus=change[2])
        step0_services.append(c)
    step0_jobs = list(step0.jobs) + [
        JobPlacement(job_id=job_id, pool=h.pool, gpus=jobs[job_id].spec.gpus, borrows_from=h.service)
        for job_id, h in sorted(borrowers.items())
    ]
    new_jobs = [_borrowing(d, borrowers, given, jobs, held_nodes) for d in allocation.jobs]
    return rewrite_step0(
        decision, step0_services=step0_services, step0_jobs=step0_jobs, services=services, jobs=new_jobs
    )


def _lending_services(
    decisions: list[ServiceDecision], lendable: dict[tuple[str, str], _Lendable]
) -> tuple[list[ServiceDecision], _Given]:
    """Each service decision less what it lends, with its burst ceiling."""
    given: _Given = {}
    new_services: list[ServiceDecision] = []
    for sd in decisions:
        h = lendable.get((sd.service, sd.pool))
        if h is None or h.lent_gpus == 0:
            new_services.append(sd)
            continue
        burst = math.ceil(h.lent_gpus / h.per_replica) * h.per_replica
        gpus = sd.gpus - burst
        replicas = round(gpus / h.per_replica)
        given[(sd.service, sd.pool)] = (gpus, replicas, float(burst))
        reason = (
            f"{sd.reason}; {burst} of them lent to preemptible jobs, so {gpus:g} run now (its demand "
            f"now and median forecast need {h.need_gpus:g}); its autoscaler takes the lent GPUs back "
            f"within the step if demand rises"
        )
        new_services.append(sd.revised(gpus=gpus, replicas=replicas, burst_gpus=float(burst), reason=reason))
    return new_services, given


def _borrowing(
    d: JobDecision,
    borrowers: dict[str, _Lendable],
    given: _Given,
    jobs: Mapping[str, JobState],
    held_nodes: Mapping[str, Mapping[str, float]],
) -> JobDecision:
    """A borrower's decision: run on the service's headroom (others unchanged)."""
    h = borrowers.get(d.job_id)
    if h is None:
        return d
    spec = jobs[d.job_id].spec
    held = held_nodes.get(h.pool, {})
    avoid = set(d.avoid_nodes if d.pool == h.pool else []) | {
        node for node, weight in held.items() if weight > spec.priority_weight
    }
    keep = given[(h.service, h.pool)][0]
    was = "kept running instead of preempted" if d.action == JobAction.PREEMPT else "starts"
    reason = (
        f"run: {was} on {h.service}'s burst headroom in pool {h.pool} ({spec.gpus} GPUs, weight "
        f"{spec.priority_weight:g}); preempted first if {h.service}'s demand rises above "
        f"{keep:g} GPUs ({_checkpoints(spec.checkpoint_interval_s)})"
    )
    return JobDecision(
        job_id=d.job_id,
        action=JobAction.RUN,
        pool=h.pool,
        gpus=spec.gpus,
        reason=reason,
        cause=DecisionCause.BORROWS_HEADROOM,
        borrows_from=h.service,
        avoid_nodes=sorted(avoid),
    )


def _checkpoints(interval_s: float | None) -> str:
    return (
        f"checkpoints every {interval_s:g} s"
        if interval_s
        else "no checkpoints: it would restart from the beginning"
    )

"""Burst over batch (pipeline stage 8, after bursting into idle GPUs, optimizer/idle_burst.py):
every service may scale up within the step over the preemptible batch in its pools that loses least
if stopped, by up to its own GPUs there or, where its demand surged within the last day, its
largest rise if that is more.

The plan sizes each service for its demand now plus the move its own past makes within a step
(optimizer/peak_margin.py). A rise well past that move (a launch, a flash crowd, a burst) tends to
go on: demand that doubles in half an hour rises by a third again before the next decision, and a
replica the next plan asks for serves only after its start-up. Reserving for such a rise in the
plan stops batch at once whether it comes or not; a burst ceiling stops batch only if it does, as a
horizontal autoscaler over priority-class preemption would. So each service gets, in each pool it
runs in, a ceiling taken from the running preemptible jobs there that lose least if stopped
(weight x GPU-hours since their last checkpoint plus their restart; a job that never checkpoints
only within its first step's work), which are marked as its borrowers:

- first, a service whose step mean rose past its peak margin in any step of the last day
  (``MARGIN_WINDOW_STEPS``, the window its margin is read from) gets the largest such rise (whole
  replicas), the largest surges first: a service that surged once within the day surges again, and
  the next burst starts between two decisions, before any plan has seen it;
- then every service gets, from the jobs left, up to its GPUs in the pool (a horizontal
  autoscaler's default scale-up at least doubles a deployment in far less than a step): a rise its
  past never made (a launch that triples demand at once) is followed within the step instead of a
  step later. Before this (commit f9c5c0a), on a held-out workload a 3x flash crowd on a
  pool that batch filled left 0.81% of demand short (kueue-hpa 0.052%), 0.13% since.

The simulated autoscaler (simulator/autoscaler.py) scales up only when demand passes the service's
capacity, so a ceiling costs nothing until then. Over 36 runs of three held-out sets, same session,
before and after the standing ceiling: SLO shortfall summed 2.740 -> 1.763 points (kueue-hpa's
3.344), preemptions 457 -> 485, lost work 678 -> 744 GPU-hours, PWT / best baseline summed 36.723
-> 36.698; over the 45 bench runs 0.723 -> 0.723 points, 973 -> 971 preemptions.

Before commit 8aaf026 the ceiling followed only the last step's rise: a service bursting in a pool that
batch fills (no idle GPUs, nothing lent) was short from each burst's start to the next decision. On
a held-out workload (an embedding service bursting 2x for 20 minutes six times a day beside a
closed loop of 300 short one-GPU jobs) its SLO shortfall was 0.94% and 1.64% (kueue-hpa, whose
services may always double over batch: 0.18% and 0.44%), nearly all of it demand above the step's
mean that no ceiling covered (``python -m bench.slo_breakdown``'s ``sub-tick-peak``); with the day's
largest rise 0.15% and 0.57%. Figures over the benchmark: README, under Architecture.

Pools that time-slice GPUs are left out, as in lending (optimizer/headroom.py): with them in, over
the 57 bench runs the SLO shortfall fell in two time-sliced runs (timeslice-mixed 0.188% -> 0.113%,
already under kueue-hpa's 0.559%) for 13 more preemptions, and rose in a third.

Pure: a function of the decision and the cluster state.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping

import numpy as np

from loop import Decision
from optimizer.peak_margin import MARGIN_WINDOW_STEPS, peak_margin_gpus
from optimizer.plan_build import rewrite_step0
from schemas import ClusterState, JobAction, JobDecision, JobState, JobStatus, ServiceDecision, ServiceState


def surge_gpus(service: ServiceState, z: float, step_s: int) -> int:
    """The largest rise of a service's step mean within the last day (``MARGIN_WINDOW_STEPS``), in
    whole replicas, when it is past the service's peak margin at ``z``; else 0."""
    history, spec = service.demand_history, service.spec
    if len(history) < 2:
        return 0
    rise = float(np.max(np.diff(np.asarray(history[-(MARGIN_WINDOW_STEPS + 1) :], dtype=float))))
    if rise <= peak_margin_gpus(history, z, spec.startup_s, step_s) + 1e-9:
        return 0
    return math.ceil(rise / spec.gpus_per_replica - 1e-9) * spec.gpus_per_replica


def stop_cost(job: JobState) -> float:
    """Weight x GPU-seconds a stop loses: the work since its last checkpoint and its restart."""
    spec = job.spec
    return spec.priority_weight * (job.since_checkpoint_gpu_s + spec.restart_cost_s * spec.gpus)


def burst_over_batch(decision: Decision, state: ClusterState, z: float) -> Decision:
    """The decision with each service's burst ceiling raised, over the cheapest preemptible jobs
    running in its pools, by its surge within the last day, then up to its GPUs there (unchanged
    where no such job runs)."""
    allocation = decision.allocation
    if allocation.fallback or not allocation.services:
        return decision
    pools = {p.name: p for p in state.pools}
    jobs = {j.spec.job_id: j for j in state.jobs}
    per_replica = {s.spec.service: s.spec.gpus_per_replica for s in state.services}
    surges: dict[str, float] = {s.spec.service: surge_gpus(s, z, state.step_s) for s in state.services}
    victims = _cheapest_first(allocation.jobs, jobs, state.step_s)
    lenders: dict[str, str] = {}
    added: dict[tuple[str, str], float] = defaultdict(float)

    def raise_ceiling(s: ServiceDecision, want: float) -> float:
        """Raise ``s``'s ceiling by up to ``want`` GPUs over the cheapest unmarked jobs in its pool."""
        pool = pools.get(s.pool)
        if want <= 0 or s.replicas == 0 or pool is None or pool.max_share > 1:
            return 0.0
        per = per_replica[s.service]
        chosen: list[JobDecision] = []
        got = 0
        for d in victims.get(s.pool, []):
            if got >= want:
                break
            if d.job_id in lenders:
                continue
            chosen.append(d)
            got += d.gpus
        ceiling = min(got, want) // per * per
        if ceiling > 0:
            added[(s.service, s.pool)] += ceiling
            lenders.update({v.job_id: s.service for v in chosen})
        return float(ceiling)

    for s in sorted(allocation.services, key=lambda s: (-surges.get(s.service, 0), -s.gpus, s.pool)):
        surges[s.service] = surges.get(s.service, 0) - raise_ceiling(s, surges.get(s.service, 0))
    surged = set(added)
    for s in sorted(allocation.services, key=lambda s: (-s.gpus, s.service, s.pool)):
        raise_ceiling(s, s.gpus - added.get((s.service, s.pool), 0.0))
    if not added:
        return decision
    services = [
        _with_ceiling(s, added.get((s.service, s.pool), 0.0), (s.service, s.pool) in surged)
        for s in allocation.services
    ]
    first = decision.plan.blocks[0]
    step0_services = [
        c.revised(burst_gpus=c.burst_gpus + added.get((c.service, c.pool), 0.0)) for c in first.services
    ]
    step0_jobs = [j.revised(borrows_from=lenders[j.job_id]) if j.job_id in lenders else j for j in first.jobs]
    new_jobs = [_borrowing(d, lenders) for d in allocation.jobs]
    return rewrite_step0(
        decision, step0_services=step0_services, step0_jobs=step0_jobs, services=services, jobs=new_jobs
    )


def _cheapest_first(
    decisions: list[JobDecision], jobs: Mapping[str, JobState], step_s: int
) -> dict[str, list[JobDecision]]:
    """Per pool, the preemptible jobs running on there that borrow no lent headroom, the cheapest
    to stop first (then by id), sorted once for every service's ceiling (each takes those no other
    service marked). A job that never checkpoints would lose all its work: it is marked only within
    its first step's work (three-pools-nockpt: a 16-GPU job 11 hours in, marked because the cheaper
    ones had too few GPUs, lost 180 GPU-hours to a burst)."""
    out = []
    for d in decisions:
        job = jobs.get(d.job_id)
        if (
            d.action != JobAction.RUN
            or d.pool is None
            or d.borrows_from is not None
            or job is None
            or job.status != JobStatus.RUNNING
            or not job.spec.preemptible
            or (
                job.spec.checkpoint_interval_s is None and job.since_checkpoint_gpu_s > job.spec.gpus * step_s
            )
        ):
            continue
        out.append((stop_cost(job), d.job_id, d))
    by_pool: dict[str, list[JobDecision]] = defaultdict(list)
    for _, _, d in sorted(out, key=lambda t: (t[0], t[1])):
        by_pool[d.pool or ""].append(d)
    return by_pool


def _with_ceiling(s: ServiceDecision, extra: float, surged: bool) -> ServiceDecision:
    if extra <= 0:
        return s
    why = "its demand rose past its usual move within the last day, so " if surged else ""
    reason = (
        f"{s.reason}; {why}its autoscaler may add up to {extra:g} GPUs within the step if its demand "
        "passes its capacity, preempting the batch jobs that lose least"
    )
    return s.revised(burst_gpus=s.burst_gpus + extra, reason=reason)


def _borrowing(d: JobDecision, lenders: Mapping[str, str]) -> JobDecision:
    """The job marked as a borrower of the service whose autoscaler may stop it first
    (``borrows_from``; on Kubernetes the ``ebbtide.io/borrows-from`` annotation). Its reason is left
    as it was: which jobs are marked moves from step to step as their work since the last
    checkpoint does, and a reason that said so changed in words at each move, a new Kubernetes
    Event each time (steady: 11.6 Events a step with it, 6.4 without)."""
    service = lenders.get(d.job_id)
    return d if service is None else d.revised(borrows_from=service)

"""Fallback plans, for when the solver times out, finds the model infeasible or fails.

Stand-in for pipeline stages 3 to 5 (optimizer/planner.py calls it when the solve gives nothing).

First choice: the last feasible plan shifted by one step (its next step's placements are
preferred, then repaired against the current state by the same rounding that makes every plan
feasible). Otherwise a greedy plan: inference gets its SLO quantile on dedicated GPUs, running jobs
keep their GPUs, waiting jobs start by priority weight where they fit. Pure; never raises on
well-formed inputs.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np

from loop import Decision
from optimizer.config import PlannerConfig
from optimizer.inputs import PlanInputs
from optimizer.rounding import RoundedPlan, greedy_service_targets, round_jobs, services_free
from schemas import (
    Allocation,
    ClusterState,
    HorizonPlan,
    JobAction,
    JobDecision,
    JobPlacement,
    JobState,
    JobStatus,
    PlanBlock,
    ServiceCapacity,
    ServiceDecision,
    SolverInfo,
)


def shifted_preferences(
    last: HorizonPlan | None, inputs: PlanInputs, now: datetime
) -> tuple[np.ndarray, np.ndarray] | None:
    """(job pool [J], service replicas [S, P]) the last plan had for the step starting now."""
    if last is None or last.step_s != inputs.step_s:
        return None
    offset = round((now - last.issued_at).total_seconds() / inputs.step_s)
    if offset < 1 or offset >= last.horizon_steps:
        return None
    step = last.step(offset)
    job_index = {job_id: j for j, job_id in enumerate(inputs.job_ids)}
    pool_index = {name: p for p, name in enumerate(inputs.pool_names)}
    svc_index = {name: s for s, name in enumerate(inputs.service_names)}
    job_pool = np.full(inputs.n_jobs, -1, dtype=np.int64)
    for placement in step.jobs:
        j, p = job_index.get(placement.job_id), pool_index.get(placement.pool)
        if j is not None and p is not None and inputs.job_allowed[j, p]:
            job_pool[j] = p
    replicas = np.zeros((inputs.n_services, inputs.n_pools))
    for capacity in step.services:
        s, p = svc_index.get(capacity.service), pool_index.get(capacity.pool)
        if s is not None and p is not None:
            replicas[s, p] = capacity.replicas
    return job_pool, replicas


def greedy_plan(
    inputs: PlanInputs, config: PlannerConfig, prefer: tuple[np.ndarray, np.ndarray] | None = None
) -> RoundedPlan:
    prefer_pool, prefer_replicas = prefer if prefer is not None else (None, None)
    replicas, gpus = greedy_service_targets(inputs, prefer_replicas)
    free = services_free(inputs, gpus)
    n_jobs, n_blocks = inputs.n_jobs, inputs.blocks.count
    room = free[:, 0] / max(float(free[:, 0].max(initial=0.0)), 1.0)
    share0 = np.where(inputs.job_allowed, 0.5 + 0.4 * room[None, :], 0.0)
    running = inputs.job_running_pool >= 0
    if n_jobs:
        share0[running] = 0.0
        share0[np.flatnonzero(running), inputs.job_running_pool[running]] = 1.0
        if prefer_pool is not None:
            chosen = np.flatnonzero(prefer_pool >= 0)
            share0[chosen, prefer_pool[chosen]] = 1.0
    share = np.ones((n_jobs, n_blocks))
    job_pool, preempted, _, outcome = round_jobs(
        inputs,
        free,
        share0,
        share,
        threshold=0.5,
        max_preemptions=config.max_preemptions_per_step,
        svc_gpus0=gpus[:, :, 0].sum(axis=0) if inputs.n_services else None,
        preemption_penalty_gpu_s=config.preemption_penalty_gpu_h * 3600.0,
    )
    return RoundedPlan(replicas.astype(np.int64), gpus, job_pool, share0, share, preempted, outcome=outcome)


def keep_current_state(
    state: ClusterState,
    now: datetime,
    config: PlannerConfig,
    *,
    plan_id: str,
    policy: str,
    digest: str,
    reason: str,
) -> Decision:
    """Last line of defence when even the greedy fallback fails: change nothing. Running jobs keep
    running where they are, waiting jobs wait, services keep their replicas."""
    services, running, block = _current_block(state, config)
    info = SolverInfo(
        solver="none", status="fallback-failed", time_ms=0.0, fallback=True, fallback_reason=reason
    )
    plan = HorizonPlan(
        cluster=state.cluster,
        plan_id=plan_id,
        policy=policy,
        issued_at=now,
        step_s=config.step_s,
        horizon_steps=config.horizon_steps,
        blocks=[block],
        solver=info,
        inputs_digest=digest,
    )
    allocation = Allocation(
        cluster=state.cluster,
        plan_id=plan_id,
        policy=policy,
        issued_at=now,
        step_s=config.step_s,
        valid_until=now + timedelta(seconds=config.step_s),
        services=[
            ServiceDecision(
                service=c.service, pool=c.pool, replicas=c.replicas, gpus=c.gpus, reason=f"kept: {reason}"
            )
            for c in services
        ],
        jobs=_kept_jobs(state, running, reason),
        fallback=True,
        fallback_reason=reason,
    )
    return Decision(plan=plan, allocation=allocation)


def _kept_jobs(state: ClusterState, running: list[JobState], reason: str) -> list[JobDecision]:
    """Running jobs run on where they run; waiting jobs wait."""
    return [
        JobDecision(
            job_id=j.spec.job_id,
            action=JobAction.RUN,
            pool=j.pool,
            gpus=j.spec.gpus,
            reason=f"run: kept; {reason}",
        )
        if j in running
        else JobDecision(job_id=j.spec.job_id, action=JobAction.HOLD, reason=f"held: {reason}")
        for j in state.jobs
        if j.status in (JobStatus.RUNNING, JobStatus.QUEUED)
    ]


def _current_block(
    state: ClusterState, config: PlannerConfig
) -> tuple[list[ServiceCapacity], list[JobState], PlanBlock]:
    """What runs now (services' replicas, running jobs) held over every step of the horizon."""
    pools = {p.name for p in state.pools}
    services = [
        ServiceCapacity(
            service=s.spec.service, pool=pool, replicas=n, gpus=float(n * s.spec.gpus_per_replica)
        )
        for s in state.services
        for pool, n in s.replicas.items()
        if pool in pools and n > 0
    ]
    running = [j for j in state.jobs if j.status == JobStatus.RUNNING and j.pool in pools]
    placements = [JobPlacement(job_id=j.spec.job_id, pool=j.pool or "", gpus=j.spec.gpus) for j in running]
    block = PlanBlock(first_step=0, steps=config.horizon_steps, services=services, jobs=placements)
    return services, running, block

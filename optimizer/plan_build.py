"""Building the published records: the HorizonPlan (every step) and the Allocation (step 0 only).

Steps inside one time block share the block's placements (the same immutable parts), so a 96-step
plan costs as much to build as its blocks. Parts are assembled with ``model_construct`` because
every value comes from arrays the planner has already checked; tests validate the result.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TypeVar

import numpy as np
from pydantic import BaseModel

from optimizer.inputs import PlanInputs
from optimizer.reasons import ReasonContext
from optimizer.rounding import RoundedPlan
from schemas import (
    Allocation,
    HorizonPlan,
    JobAction,
    JobDecision,
    JobPlacement,
    PlanStep,
    ServiceCapacity,
    ServiceDecision,
    SolverInfo,
)

_M = TypeVar("_M", bound=BaseModel)


def fast_part(cls: type[_M], **values: object) -> _M:
    """An immutable schema part from values the planner has already checked (no validation)."""
    part = cls.__new__(cls)
    object.__setattr__(part, "__dict__", values)
    object.__setattr__(part, "__pydantic_fields_set__", set(values))
    object.__setattr__(part, "__pydantic_extra__", None)
    object.__setattr__(part, "__pydantic_private__", None)
    return part


class PartCache:
    """Immutable plan parts reused across blocks and decisions (same job, pool, GPUs: same part)."""

    def __init__(self, max_entries: int = 50_000) -> None:
        self.parts: dict[tuple[object, ...], BaseModel] = {}
        self._max = max_entries

    def trim(self) -> None:
        if len(self.parts) >= self._max:
            self.parts.clear()


def _block_parts(
    inputs: PlanInputs, plan: RoundedPlan, b: int, cache: PartCache
) -> tuple[list[ServiceCapacity], list[JobPlacement]]:
    services: list[ServiceCapacity] = []
    for s, p in zip(*np.nonzero(plan.svc_replicas[:, :, b] > 0), strict=True):
        name, pool = inputs.service_names[s], inputs.pool_names[p]
        replicas, gpus = int(plan.svc_replicas[s, p, b]), float(plan.svc_gpus[s, p, b])
        key = ("s", name, pool, replicas, gpus)
        part = cache.parts.get(key)
        if part is None:
            part = cache.parts[key] = fast_part(
                ServiceCapacity, service=name, pool=pool, replicas=replicas, gpus=gpus
            )
        services.append(part)  # type: ignore[arg-type]
    jobs: list[JobPlacement] = []
    column = plan.job_pool[:, b]
    on = np.flatnonzero(column >= 0)
    parts = cache.parts
    ids, pools, gangs = inputs.job_ids, inputs.pool_names, inputs.job_gang
    for j, p in zip(on.tolist(), column[on].tolist(), strict=True):
        job_key = ("j", ids[j], pools[p])
        part = parts.get(job_key)
        if part is None or part.gpus != int(gangs[j]):  # type: ignore[attr-defined]
            part = parts[job_key] = fast_part(JobPlacement, job_id=ids[j], pool=pools[p], gpus=int(gangs[j]))
        jobs.append(part)  # type: ignore[arg-type]
    return services, jobs


def build_horizon_plan(
    inputs: PlanInputs,
    plan: RoundedPlan,
    *,
    plan_id: str,
    policy: str,
    digest: str,
    solver: SolverInfo,
    objective: dict[str, float],
    cache: PartCache | None = None,
) -> HorizonPlan:
    cache = cache or PartCache()
    cache.trim()
    steps: list[PlanStep] = []
    block_of = inputs.blocks.block_of_step()
    parts = [_block_parts(inputs, plan, b, cache) for b in range(inputs.blocks.count)]
    for t in range(inputs.horizon_steps):
        services, jobs = parts[int(block_of[t])]
        steps.append(fast_part(PlanStep, index=t, start=inputs.step_start(t), services=services, jobs=jobs))
    return HorizonPlan.model_construct(
        cluster=inputs.cluster,
        plan_id=plan_id,
        policy=policy,
        issued_at=inputs.now,
        step_s=inputs.step_s,
        horizon_steps=inputs.horizon_steps,
        steps=steps,
        objective=objective,
        solver=solver,
        inputs_digest=digest,
    )


def build_allocation(
    inputs: PlanInputs,
    plan: RoundedPlan,
    *,
    plan_id: str,
    policy: str,
    fallback_reason: str | None,
) -> Allocation:
    ctx = ReasonContext.build(inputs, plan)
    services: list[ServiceDecision] = []
    for s in range(inputs.n_services):
        for p in range(inputs.n_pools):
            replicas = int(plan.svc_replicas[s, p, 0])
            if replicas == 0 and inputs.svc_replicas_now[s, p] == 0:
                continue
            services.append(
                fast_part(
                    ServiceDecision,
                    service=inputs.service_names[s],
                    pool=inputs.pool_names[p],
                    replicas=replicas,
                    gpus=float(plan.svc_gpus[s, p, 0]),
                    reason=ctx.service_reason(s, p),
                )
            )
    jobs: list[JobDecision] = []
    for j in inputs.active_jobs().tolist():
        p = int(plan.job_pool[j, 0])
        if p >= 0:
            decision = fast_part(
                JobDecision,
                job_id=inputs.job_ids[j],
                action=JobAction.RUN,
                pool=inputs.pool_names[p],
                gpus=int(inputs.job_gang[j]),
                reason=ctx.run_reason(j, p),
            )
        elif plan.preempted[j]:
            decision = fast_part(
                JobDecision,
                job_id=inputs.job_ids[j],
                action=JobAction.PREEMPT,
                pool=inputs.pool_names[inputs.job_running_pool[j]],
                gpus=0,
                reason=ctx.preempt_reason(j),
            )
        else:
            decision = fast_part(
                JobDecision,
                job_id=inputs.job_ids[j],
                action=JobAction.HOLD,
                pool=None,
                gpus=0,
                reason=ctx.hold_reason(j),
            )
        jobs.append(decision)
    return Allocation.model_construct(
        cluster=inputs.cluster,
        plan_id=plan_id,
        policy=policy,
        issued_at=inputs.now,
        step_s=inputs.step_s,
        valid_until=inputs.now + timedelta(seconds=inputs.step_s),
        services=services,
        jobs=jobs,
        fallback=fallback_reason is not None,
        fallback_reason=fallback_reason,
    )

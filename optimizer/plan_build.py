"""Building the published records: the HorizonPlan (every step) and the Allocation (step 0 only).

Steps inside one time block share the block's placements (the same immutable parts), so a 96-step
plan costs as much to build as its blocks. Parts are assembled with ``model_construct`` because
every value comes from arrays the planner has already checked; tests validate the result.
"""

from __future__ import annotations

from collections.abc import Callable
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


_FIELDS: dict[type[BaseModel], tuple[int, dict[str, object], dict[str, Callable[[], object]]]] = {}


def _field_info(cls: type[BaseModel]) -> tuple[int, dict[str, object], dict[str, Callable[[], object]]]:
    """How many fields ``cls`` has, the defaults of the optional ones, and their default factories."""
    found = _FIELDS.get(cls)
    if found is None:
        static: dict[str, object] = {}
        factories: dict[str, Callable[[], object]] = {}
        for name, info in cls.model_fields.items():
            if info.is_required():
                continue
            if info.default_factory is not None:
                factories[name] = info.default_factory  # type: ignore[assignment]
            else:
                static[name] = info.default
        found = _FIELDS[cls] = (len(cls.model_fields), static, factories)
    return found


def fast_part(cls: type[_M], **values: object) -> _M:
    """An immutable schema part from values the planner has already checked (no validation);
    optional fields not given take their defaults."""
    part = cls.__new__(cls)
    fields_set = set(values)
    count, static, factories = _field_info(cls)
    if len(values) < count:
        values = {**static, **{name: make() for name, make in factories.items()}, **values}
    object.__setattr__(part, "__dict__", values)
    object.__setattr__(part, "__pydantic_fields_set__", fields_set)
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


def _service_parts(inputs: PlanInputs, plan: RoundedPlan, cache: PartCache) -> list[list[ServiceCapacity]]:
    """Per block, the capacity of each service in each pool it has replicas in."""
    services: list[list[ServiceCapacity]] = [[] for _ in range(plan.svc_replicas.shape[2])]
    on_s, on_p, on_b = np.nonzero(plan.svc_replicas > 0)
    replicas = plan.svc_replicas[on_s, on_p, on_b].tolist()
    gpus = plan.svc_gpus[on_s, on_p, on_b].tolist()
    names, pools, parts = inputs.service_names, inputs.pool_names, cache.parts
    for s, p, b, n, g in zip(on_s.tolist(), on_p.tolist(), on_b.tolist(), replicas, gpus, strict=True):
        key = ("s", names[s], pools[p], int(n), float(g))
        part = parts.get(key)
        if part is None:
            part = parts[key] = fast_part(
                ServiceCapacity, service=names[s], pool=pools[p], replicas=int(n), gpus=float(g)
            )
        services[b].append(part)  # type: ignore[arg-type]
    return services


def _job_parts(inputs: PlanInputs, plan: RoundedPlan, cache: PartCache) -> list[list[JobPlacement]]:
    """Per block, the placements of the jobs running in it (in job order). Each (job, pool) part
    is looked up once per decision, however many blocks it spans."""
    n_blocks = plan.job_pool.shape[1]
    jobs: list[list[JobPlacement]] = [[] for _ in range(n_blocks)]
    pool_of = plan.job_pool
    on_j, on_b = np.nonzero(pool_of >= 0)
    parts = cache.parts
    ids, pools, gangs = inputs.job_ids, inputs.pool_names, inputs.job_gang.tolist()
    mine: dict[tuple[int, int], JobPlacement] = {}
    for j, b, p in zip(on_j.tolist(), on_b.tolist(), pool_of[on_j, on_b].tolist(), strict=True):
        part = mine.get((j, p))
        if part is None:
            job_key = ("j", ids[j], pools[p])
            cached = parts.get(job_key)
            if not isinstance(cached, JobPlacement) or cached.gpus != int(gangs[j]):
                cached = parts[job_key] = fast_part(
                    JobPlacement, job_id=ids[j], pool=pools[p], gpus=int(gangs[j])
                )
            part = mine[(j, p)] = cached
        jobs[b].append(part)
    return jobs


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
    block_of = inputs.blocks.block_of_step().tolist()
    job_parts = _job_parts(inputs, plan, cache)
    service_parts = _service_parts(inputs, plan, cache)
    step = timedelta(seconds=inputs.step_s)
    start = inputs.now
    for t in range(inputs.horizon_steps):
        b = block_of[t]
        steps.append(
            fast_part(PlanStep, index=t, start=start, services=service_parts[b], jobs=job_parts[b])
        )
        start = start + step
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
    replicas0 = plan.svc_replicas[:, :, 0]
    shown = np.nonzero((replicas0 != 0) | (inputs.svc_replicas_now != 0))
    for s, p in zip(*(i.tolist() for i in shown), strict=True):
        services.append(
            fast_part(
                ServiceDecision,
                service=inputs.service_names[s],
                pool=inputs.pool_names[p],
                replicas=int(replicas0[s, p]),
                gpus=float(plan.svc_gpus[s, p, 0]),
                reason=ctx.service_reason(s, p),
            )
        )
    jobs: list[JobDecision] = []
    pool0 = plan.job_pool[:, 0].tolist()
    preempted = plan.preempted.tolist()
    gangs = inputs.job_gang.tolist()
    for j in inputs.active_jobs().tolist():
        p = pool0[j]
        if p >= 0:
            decision = fast_part(
                JobDecision,
                job_id=inputs.job_ids[j],
                action=JobAction.RUN,
                pool=inputs.pool_names[p],
                gpus=int(gangs[j]),
                reason=ctx.run_reason(j, p),
            )
        elif preempted[j]:
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

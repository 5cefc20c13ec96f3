"""Building the published records: the HorizonPlan (every step) and the Allocation (step 0 only).

Steps inside one time block share the block's placements (the same immutable parts), so a 96-step
plan costs as much to build as its blocks. Parts are assembled with ``model_construct`` because
every value comes from arrays the planner has already checked; tests validate the result.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Generic, NamedTuple, TypeVar

import numpy as np
from pydantic import BaseModel

from optimizer.inputs import PlanInputs
from optimizer.reasons import JobFacts, ReasonContext
from optimizer.rounding import RoundedPlan, split_by_block
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


_new_object = object.__new__
# BaseModel keeps these in slots: their descriptors set them faster than object.__setattr__
_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__


def _assemble(cls: type[_M], values: dict[str, object], fields_set: set[str]) -> _M:
    """A part holding ``values`` (every field, in field-layout order) without validation."""
    part = _new_object(cls)
    _set_dict(part, values)
    _set_fields_set(part, fields_set)
    _set_extra(part, None)
    _set_private(part, None)
    return part


def fast_part(cls: type[_M], **values: object) -> _M:
    """An immutable schema part from values the planner has already checked (no validation);
    optional fields not given take their defaults."""
    fields_set = set(values)
    count, static, factories = _field_info(cls)
    if len(values) < count:
        values = {**static, **{name: make() for name, make in factories.items()}, **values}
    return _assemble(cls, values, fields_set)


class PartMaker(Generic[_M]):
    """``fast_part(cls, **dict(zip(names, values)))`` for parts built many times per decision:
    values by position, the layout of the defaults worked out once."""

    def __init__(self, cls: type[_M], *names: str, field_order: bool = False) -> None:
        """``field_order``: lay the values out in the schema's field order, as ``model_construct``
        does (else in the order ``fast_part`` gives)."""
        count, static, factories = _field_info(cls)
        if any(name not in cls.model_fields for name in names) or any(n not in names for n in factories):
            raise ValueError(f"{cls.__name__}: give every field with a default factory, and only fields")
        self._cls = cls
        self._names = names
        self._given = set(names)  # copied into each part as its fields set
        # the key order fast_part gives: defaults first, then the given fields (as given, if all)
        self._layout: dict[str, object] = dict.fromkeys(names)
        if len(names) < count:
            self._layout = {**static, **dict.fromkeys(factories), **self._layout}
        if field_order:
            self._layout = {name: self._layout[name] for name in cls.model_fields if name in self._layout}

    def __call__(self, *values: object) -> _M:
        # _assemble, inlined (this runs once per job and service in every decision); the length
        # check stands in for zip(strict=True), which costs more than the rest of the merge
        if len(values) != len(self._names):
            raise ValueError(f"{self._cls.__name__}: {len(values)} values for fields {self._names}")
        merged = self._layout.copy()
        merged.update(zip(self._names, values, strict=False))
        part = _new_object(self._cls)
        _set_dict(part, merged)
        _set_fields_set(part, self._given.copy())
        _set_extra(part, None)
        _set_private(part, None)
        return part


_job_decision = PartMaker(JobDecision, "job_id", "action", "pool", "gpus", "reason")
_service_decision = PartMaker(ServiceDecision, "service", "pool", "replicas", "gpus", "reason")
# The published records, as ``model_construct`` makes them (every field but the schema version
# given, in the schema's order), without its per-field alias and default lookups.
_horizon_plan = PartMaker(
    HorizonPlan,
    "cluster",
    "plan_id",
    "policy",
    "issued_at",
    "step_s",
    "horizon_steps",
    "steps",
    "objective",
    "solver",
    "inputs_digest",
    field_order=True,
)
_allocation = PartMaker(
    Allocation,
    "cluster",
    "plan_id",
    "policy",
    "issued_at",
    "step_s",
    "valid_until",
    "services",
    "jobs",
    "fallback",
    "fallback_reason",
    field_order=True,
)


class PartCache:
    """Immutable plan parts reused across blocks and decisions (same job, pool, GPUs: same part)."""

    def __init__(self, max_entries: int = 50_000) -> None:
        self.parts: dict[tuple[object, ...], BaseModel] = {}
        self.texts: dict[tuple[object, ...], str] = {}  # reason text (ReasonContext.texts)
        self._max = max_entries

    def trim(self) -> None:
        if len(self.parts) >= self._max:
            self.parts.clear()
        if len(self.texts) >= self._max:
            self.texts.clear()


def _service_parts(inputs: PlanInputs, plan: RoundedPlan, cache: PartCache) -> list[list[ServiceCapacity]]:
    """Per block, the capacity of each service in each pool it has replicas in."""
    services: list[list[ServiceCapacity]] = [[] for _ in range(plan.svc_replicas.shape[2])]
    on_s, on_p, on_b = (plan.svc_replicas > 0).nonzero()
    replicas = plan.svc_replicas[on_s, on_p, on_b].tolist()
    gpus = plan.svc_gpus[on_s, on_p, on_b].tolist()
    names, pools, parts = inputs.service_names, inputs.pool_names, cache.parts
    # entries come service by service, pool by pool, block by block, and most repeat the one
    # before (same replicas on the same GPUs in the next block): those reuse its part unlooked-up
    last_s, last_p, last_n, last_g = -1, -1, -1, -1.0
    part: BaseModel | None = None
    for s, p, b, n, g in zip(on_s.tolist(), on_p.tolist(), on_b.tolist(), replicas, gpus, strict=True):
        if part is None or n != last_n or g != last_g or p != last_p or s != last_s:
            key = ("s", names[s], pools[p], n, g)  # n, g: int and float already (as below)
            part = parts.get(key)
            if part is None:
                part = parts[key] = fast_part(
                    ServiceCapacity, service=names[s], pool=pools[p], replicas=int(n), gpus=float(g)
                )
            last_s, last_p, last_n, last_g = s, p, n, g
        services[b].append(part)  # type: ignore[arg-type]
    return services


def _job_parts(inputs: PlanInputs, plan: RoundedPlan, cache: PartCache) -> list[list[JobPlacement]]:
    """Per block, the placements of the jobs running in it (in job order). Each (job, pool) part
    is looked up once per decision, however many blocks it spans."""
    pool_of = plan.job_pool
    n_pools = max(inputs.n_pools, 1)
    on_b, on_j = (pool_of.T >= 0).nonzero()  # block-major, jobs in order within a block
    codes = on_j * n_pools + pool_of[on_j, on_b]  # one code per (job, pool)
    seen = np.zeros(pool_of.shape[0] * n_pools, dtype=bool)
    seen[codes] = True
    rank = seen.cumsum() - 1  # code -> its index among the codes seen
    ids, pools, gangs, parts = inputs.job_ids, inputs.pool_names, inputs.job_gang.tolist(), cache.parts
    mine: list[JobPlacement] = []
    for code in seen.nonzero()[0].tolist():
        j, p = divmod(code, n_pools)
        key = ("j", ids[j], pools[p], gangs[j])
        part = parts.get(key)
        if part is None:
            part = parts[key] = fast_part(JobPlacement, job_id=ids[j], pool=pools[p], gpus=int(gangs[j]))
        mine.append(part)  # type: ignore[arg-type]
    placed = list(map(mine.__getitem__, rank[codes].tolist()))
    return split_by_block(placed, on_b, pool_of.shape[1])


def _plan_step(
    index: int, start: datetime, services: list[ServiceCapacity], jobs: list[JobPlacement]
) -> PlanStep:
    """A PlanStep as ``fast_part`` builds it (every field given, so no defaults), built directly:
    a plan has one per step (``step_shells``)."""
    return _assemble(
        PlanStep,
        {"index": index, "start": start, "services": services, "jobs": jobs},
        {"index", "start", "services", "jobs"},
    )


def step_shells(now: datetime, step_s: int, horizon_steps: int) -> list[PlanStep]:
    """The steps of a plan issued at ``now``, each with its index and start and, for now, no
    capacity and no jobs. They need nothing from the solve, so the planner makes them on its
    worker thread while HiGHS solves (optimizer/alongside.py); ``build_horizon_plan`` then fills
    in each step's services and jobs. Not shared before that: each plan gets new ones."""
    steps: list[PlanStep] = []
    step = timedelta(seconds=step_s)
    start = now
    for index in range(horizon_steps):
        steps.append(_plan_step(index, start, [], []))
        start = start + step
    return steps


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
    shells: list[PlanStep] | None = None,
) -> HorizonPlan:
    """``shells``: this plan's steps from ``step_shells`` (made ahead), or None to make them here."""
    cache = cache or PartCache()
    cache.trim()
    if shells is None:
        shells = step_shells(inputs.now, inputs.step_s, inputs.horizon_steps)
    elif len(shells) != inputs.horizon_steps or (shells and shells[0].start != inputs.now):
        first = shells[0].start if shells else None
        raise ValueError(f"step shells for another plan: {len(shells)} steps from {first}")
    job_parts = _job_parts(inputs, plan, cache)
    service_parts = _service_parts(inputs, plan, cache)
    # the steps of each block in turn (blocks cover the horizon) share the block's parts
    block_start = 0
    for services, jobs, count in zip(service_parts, job_parts, inputs.blocks.n_steps.tolist(), strict=True):
        for shell in shells[block_start : block_start + count]:
            fields = shell.__dict__
            fields["services"] = services
            fields["jobs"] = jobs
        block_start += count
    return _horizon_plan(
        inputs.cluster,
        plan_id,
        policy,
        inputs.now,
        inputs.step_s,
        inputs.horizon_steps,
        shells,
        objective,
        solver,
        digest,
    )


class AllocationAhead(NamedTuple):
    """What an allocation needs from the inputs alone, made while HiGHS solves: the reasons' job
    facts, and per job (by index) its decision should the plan keep it running in its pool (None:
    not running now). Most running jobs run on, so most job decisions are made here."""

    facts: JobFacts
    kept: list[JobDecision | None]


def allocation_ahead(
    inputs: PlanInputs, texts: dict[tuple[object, ...], str] | None = None
) -> AllocationAhead:
    """``texts``: the PartCache's, kept between decisions."""
    facts = JobFacts.of(inputs, texts)
    kept: list[JobDecision | None] = [None] * inputs.n_jobs
    ids, pools, gangs, run_text = inputs.job_ids, inputs.pool_names, facts.gang, facts.run_text
    for j in facts.active:
        p = facts.running_pool[j]
        if p >= 0:
            kept[j] = _job_decision(ids[j], JobAction.RUN, pools[p], int(gangs[j]), run_text(j, p, True))
    return AllocationAhead(facts, kept)


def build_allocation(
    inputs: PlanInputs,
    plan: RoundedPlan,
    *,
    plan_id: str,
    policy: str,
    fallback_reason: str | None,
    cache: PartCache | None = None,
    ahead: AllocationAhead | None = None,
) -> Allocation:
    """``cache``: kept between decisions, for reason text that repeats; ``ahead``:
    allocation_ahead(inputs, cache.texts) when made while HiGHS solved (None: made here)."""
    if cache is not None:
        cache.trim()
    kept: list[JobDecision | None] | None = None
    if ahead is None:  # the facts only: which jobs run on is known from the plan by now
        facts = JobFacts.of(inputs, cache.texts if cache is not None else None)
    elif ahead.facts.inputs is not inputs:
        raise ValueError("an allocation made ahead for other inputs")
    else:
        facts, kept = ahead
    ctx = ReasonContext.build(inputs, plan, facts=facts)
    services: list[ServiceDecision] = []
    replicas0 = plan.svc_replicas[:, :, 0]
    replica_rows, gpu_rows = replicas0.tolist(), plan.svc_gpus[:, :, 0].tolist()
    shown = ((replicas0 != 0) | (inputs.svc_replicas_now != 0)).nonzero()
    names, pools, service_reason = inputs.service_names, inputs.pool_names, ctx.service_reason
    for s, p in zip(*(i.tolist() for i in shown), strict=True):
        replicas, gpus = int(replica_rows[s][p]), float(gpu_rows[s][p])
        reason = service_reason(s, p, replicas, gpus)
        services.append(_service_decision(names[s], pools[p], replicas, gpus, reason))
    jobs: list[JobDecision] = []
    pool0 = plan.job_pool[:, 0].tolist()
    preempted = plan.preempted.tolist()
    ids, pools, gangs, running_pool = inputs.job_ids, inputs.pool_names, facts.gang, facts.running_pool
    for j in ctx.facts.active:
        p = pool0[j]
        # fields as _job_decision names them: job_id, action, pool, gpus, reason
        if p >= 0:
            # most jobs run on where they run: their decision was made ahead
            made = kept[j] if kept is not None and p == running_pool[j] else None
            if made is None:
                made = _job_decision(ids[j], JobAction.RUN, pools[p], int(gangs[j]), ctx.run_reason(j, p))
            decision = made
        elif preempted[j]:
            running_in = pools[running_pool[j]]
            decision = _job_decision(ids[j], JobAction.PREEMPT, running_in, 0, ctx.preempt_reason(j))
        else:
            decision = _job_decision(ids[j], JobAction.HOLD, None, 0, ctx.hold_reason(j))
        jobs.append(decision)
    return _allocation(
        inputs.cluster,
        plan_id,
        policy,
        inputs.now,
        inputs.step_s,
        inputs.now + timedelta(seconds=inputs.step_s),
        services,
        jobs,
        fallback_reason is not None,
        fallback_reason,
    )

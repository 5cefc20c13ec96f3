"""Shortcuts in publishing a decision give what the plain computation gives.

``build_horizon_plan`` fills in the steps ``_plan_step`` made; ``_service_parts``
reuses the part of the entry before when it repeats; the reasons sum each service's step-0 GPUs
for all services at once; ``lend_headroom`` returns at once when no job is held or preempted;
``build_allocation`` takes the decisions of jobs that run on from ``allocation_ahead`` (made while
HiGHS solves). Each is compared here with the plain form it stands for.
"""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
from optimizer_cases import NOW, forecast, job, pool, service, state, three_pool_cluster

from loop import Decision
from optimizer.config import PlannerConfig
from optimizer.fallback import greedy_plan
from optimizer.headroom import lend_headroom
from optimizer.inputs import build_inputs
from optimizer.plan_build import (
    PartCache,
    _plan_step,
    _service_parts,
    allocation_ahead,
    build_allocation,
    build_horizon_plan,
)
from optimizer.reasons import ReasonContext
from optimizer.rounding import RoundedPlan
from schemas import JobAction, PlanStep, ServiceCapacity, SolverInfo

CONFIG = PlannerConfig(
    horizon_steps=24, fine_steps=3, mid_block_steps=3, mid_until_step=12, coarse_block_steps=6
)
SOLVER = SolverInfo(solver="greedy", status="ok", time_ms=0.0)


def _inputs_and_plan():  # type: ignore[no-untyped-def]
    cluster, forecasts = three_pool_cluster(9)
    inputs = build_inputs(cluster, forecasts, NOW, CONFIG)
    return cluster, forecasts, inputs, greedy_plan(inputs, CONFIG, None)


def _plan(inputs, rounded, cache: PartCache):  # type: ignore[no-untyped-def]
    return build_horizon_plan(
        inputs, rounded, plan_id="p", policy="t", digest="d", solver=SOLVER, objective={}, cache=cache
    )


def test_plan_steps_equal_plan_step_and_validation() -> None:
    _, _, inputs, rounded = _inputs_and_plan()
    plan = _plan(inputs, rounded, PartCache())
    assert [step.index for step in plan.steps] == list(range(CONFIG.horizon_steps))
    for step in plan.steps:
        assert step.start == NOW + timedelta(seconds=CONFIG.step_s * step.index)
        made = _plan_step(step.index, step.start, step.services, step.jobs)
        checked = PlanStep(index=step.index, start=step.start, services=step.services, jobs=step.jobs)
        assert step == made == checked
        assert list(step.__dict__) == list(made.__dict__)
        assert step.__pydantic_fields_set__ == made.__pydantic_fields_set__
        assert repr(step) == repr(made)
    assert any(step.services for step in plan.steps) and any(step.jobs for step in plan.steps)


def test_repeated_service_entries_share_the_part_a_lookup_gives() -> None:
    _, _, inputs, rounded = _inputs_and_plan()
    blocks = rounded.svc_replicas.shape[2]
    # one service in two pools: a run of equal blocks, a change, a gap, and the first value again
    replicas = np.zeros((1, inputs.n_pools, blocks), dtype=np.int64)
    replicas[0, 0, :] = [2, 2, 2, 3, 0, 2] + [2] * (blocks - 6)
    replicas[0, 1, 1:3] = 1
    gpus = replicas * 1.0
    gpus[0, 0, 2] = 1.5  # same replicas, other GPUs: a new part
    narrowed = RoundedPlan(
        replicas, gpus, rounded.job_pool, rounded.job_share0, rounded.job_share, rounded.preempted
    )
    cache = PartCache()
    parts = _service_parts(inputs, narrowed, cache)
    name = inputs.service_names[0]
    for b in range(blocks):
        expected = [
            ServiceCapacity(
                service=name, pool=inputs.pool_names[p], replicas=int(n), gpus=float(gpus[0, p, b])
            )
            for p, n in enumerate(replicas[0, :, b].tolist())
            if n > 0
        ]
        assert parts[b] == expected
    assert parts[0][0] is parts[1][0] is parts[5][0]  # (2 replicas, 2.0 GPUs) looked up or reused
    assert parts[2][0] is not parts[1][0] and parts[2][0].gpus == 1.5
    assert parts[4] == [] and len(cache.parts) == 4  # 2 on 2.0, 2 on 1.5, 3 on 3.0, 1 on 1.0


def test_covered_gpus_equal_each_services_own_sum_whatever_the_layout() -> None:
    _, _, inputs, rounded = _inputs_and_plan()
    rng = np.random.default_rng(7)
    gpus = rng.random(rounded.svc_gpus.shape) * 3.7
    for layout in ((0, 1, 2), (1, 0, 2), (2, 1, 0)):
        laid_out = np.ascontiguousarray(gpus.transpose(layout)).transpose(np.argsort(layout))
        plan = RoundedPlan(
            rounded.svc_replicas,
            laid_out,
            rounded.job_pool,
            rounded.job_share0,
            rounded.job_share,
            rounded.preempted,
        )
        ctx = ReasonContext.build(inputs, plan)
        assert ctx.svc_covered0 == [float(laid_out[s, :, 0].sum()) for s in range(inputs.n_services)]


def test_lending_returns_the_decision_when_every_job_runs() -> None:
    """Only held or preempted jobs borrow (test_headroom covers lending itself)."""
    cluster, forecasts, inputs, rounded = _inputs_and_plan()
    cache = PartCache()
    decision = Decision(
        plan=_plan(inputs, rounded, cache),
        allocation=build_allocation(
            inputs, rounded, plan_id="p", policy="t", fallback_reason=None, cache=cache
        ),
    )
    running = decision.allocation.model_copy(
        update={"jobs": [j for j in decision.allocation.jobs if j.action == JobAction.RUN]}
    )
    every_job_runs = Decision(plan=decision.plan, allocation=running)
    assert running.jobs and lend_headroom(every_job_runs, cluster, forecasts) is every_job_runs


def test_an_allocation_made_ahead_equals_one_made_after_the_plan() -> None:
    """Jobs running now: one runs on, one moves to another pool, one is preempted, one (queued)
    starts, one (queued) is held. Only the one that runs on takes its decision made ahead."""
    jobs = [
        job("on", 2, running_in="b", hours=3.0),
        job("moves", 1, running_in="b"),
        job("stops", 4, running_in="c", since_checkpoint_gpu_s=900.0),
        job("starts", 1),
        job("waits", 8),
    ]
    cluster = state([pool("a", 8), pool("b", 8), pool("c", 8)], jobs, [service("chat", replicas={"a": 1})])
    inputs = build_inputs(cluster, {"chat": forecast("chat", [1.0] * 24)}, NOW, CONFIG)
    greedy = greedy_plan(inputs, CONFIG, None)
    index = {job_id: j for j, job_id in enumerate(inputs.job_ids)}
    job_pool = greedy.job_pool.copy()
    job_pool[:, 0] = -1
    job_pool[[index["on"], index["moves"], index["starts"]], 0] = [1, 0, 2]
    preempted = np.zeros(inputs.n_jobs, dtype=bool)
    preempted[index["stops"]] = True
    rounded = RoundedPlan(
        greedy.svc_replicas, greedy.svc_gpus, job_pool, greedy.job_share0, greedy.job_share, preempted
    )

    def allocate(cache: PartCache, ahead=None):  # type: ignore[no-untyped-def]
        return build_allocation(
            inputs, rounded, plan_id="p", policy="t", fallback_reason=None, cache=cache, ahead=ahead
        )

    plain = allocate(PartCache())
    cache = PartCache()
    ahead = allocation_ahead(inputs, cache.texts)
    made = allocate(cache, ahead)
    assert made == plain and repr(made) == repr(plain)
    assert [d.action for d in made.jobs] == [
        JobAction.RUN,
        JobAction.RUN,
        JobAction.PREEMPT,
        JobAction.RUN,
        JobAction.HOLD,
    ]
    assert {d.job_id for d in ahead.kept if d is not None} == {"on", "moves", "stops"}
    used = [d for d in made.jobs if any(d is k for k in ahead.kept)]
    assert [d.job_id for d in used] == ["on"]
    assert made.jobs[1].reason.startswith("run: starts in pool a")  # not the kept text made ahead
    other = build_inputs(cluster, {"chat": forecast("chat", [1.0] * 24)}, NOW, CONFIG)
    with pytest.raises(ValueError, match="other inputs"):
        build_allocation(other, rounded, plan_id="p", policy="t", fallback_reason=None, ahead=ahead)


def test_published_records_are_laid_out_as_model_construct_lays_them_out() -> None:
    """The plan and the allocation are assembled by PartMakers in the schema's field order: the
    same fields, values, order, fields set and (empty) extras as ``model_construct`` gives."""
    _, _, inputs, rounded = _inputs_and_plan()
    plan = _plan(inputs, rounded, PartCache())
    allocation = build_allocation(inputs, rounded, plan_id="p", policy="t", fallback_reason=None)
    for record in (plan, allocation):
        given = {name: getattr(record, name) for name in record.__pydantic_fields_set__}
        plain = type(record).model_construct(**given)
        assert list(record.__dict__.items()) == list(plain.__dict__.items())
        assert record.__pydantic_fields_set__ == plain.__pydantic_fields_set__
        assert record.__pydantic_extra__ == plain.__pydantic_extra__
        assert record.__pydantic_private__ == plain.__pydantic_private__
        assert record == plain and repr(record) == repr(plain)
        type(record).model_validate(record.model_dump())  # and it is a valid record

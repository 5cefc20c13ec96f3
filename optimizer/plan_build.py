"""Assemble: the published records, the HorizonPlan (every step) and the Allocation (step 0 only).

Pipeline stage 6 of a decision (after the rounding in optimizer/extract.py and
optimizer/rounding.py, before the headroom is lent in optimizer/headroom.py). Every record is
validated by pydantic, once: the Allocation as one record from plain fields, the plan's distinct
placements and capacities in one call each, instead of a constructor per decision and per
part, each decision checked again inside the Allocation (with the reasons' single pass, assembly
at 200 jobs took 6.2-13.3 ms before and 3.6-9.5 ms after, three alternating pairs at load 7-8,
ratio 0.48-0.71; 148 validations per seed-scale decision became 20). The plan
carries one PlanBlock per time block of the planner (optimizer/inputs.py ``Blocks``), the steps of
a block sharing its placements (one part per job and pool, per service and pool, in each plan).
Reasons come from optimizer/reasons.py.
"""

from __future__ import annotations

from datetime import timedelta

import numpy as np
from pydantic import TypeAdapter

from loop import Decision
from optimizer.inputs import PlanInputs
from optimizer.reasons import ReasonContext
from optimizer.rounding import RoundedPlan
from optimizer.step0_outcome import Step0Outcome
from schemas import (
    Allocation,
    HorizonPlan,
    JobAction,
    JobDecision,
    JobPlacement,
    PlanBlock,
    ServiceCapacity,
    ServiceDecision,
    SolverInfo,
)

_JOB_PLACEMENTS = TypeAdapter(list[JobPlacement])
_SERVICE_CAPACITIES = TypeAdapter(list[ServiceCapacity])


def _services_by_block(inputs: PlanInputs, plan: RoundedPlan) -> list[list[ServiceCapacity]]:
    """Per block, the capacity of each service in each pool it has replicas in (one nonzero pass;
    each distinct capacity is one record, shared by the blocks that have it)."""
    index: dict[tuple[int, int, int, float], int] = {}
    rows: list[dict[str, object]] = []
    in_block: list[list[int]] = [[] for _ in range(inputs.blocks.count)]
    replicas, gpus = plan.svc_replicas, plan.svc_gpus
    block, svc, pool = (replicas.transpose(2, 0, 1) > 0).nonzero()
    counts, gpus_of = replicas[svc, pool, block].astype(int).tolist(), gpus[svc, pool, block].tolist()
    for b, s, p, count, on in zip(block.tolist(), svc.tolist(), pool.tolist(), counts, gpus_of, strict=True):
        key = (s, p, count, on)
        k = index.get(key)
        if k is None:
            k = index[key] = len(rows)
            rows.append(
                {
                    "service": inputs.service_names[s],
                    "pool": inputs.pool_names[p],
                    "replicas": key[2],
                    "gpus": key[3],
                }
            )
        in_block[b].append(k)
    parts = _SERVICE_CAPACITIES.validate_python(rows)
    return [[parts[k] for k in block] for block in in_block]


def _jobs_by_block(inputs: PlanInputs, plan: RoundedPlan) -> list[list[JobPlacement]]:
    """Per block, the placements of the jobs running in it, in job order: one record per job and
    pool, shared by the blocks that have it."""
    pools = plan.job_pool
    n_blocks, n_pools = inputs.blocks.count, inputs.n_pools
    block, job = (pools.T >= 0).nonzero()  # block by block, jobs in order within each
    keys, part_of = np.unique(job * n_pools + pools[job, block], return_inverse=True)
    jobs, in_pool = np.divmod(keys, n_pools)
    gangs = inputs.job_gang[jobs].astype(int).tolist()
    rows = [
        {"job_id": inputs.job_ids[j], "pool": inputs.pool_names[p], "gpus": gang}
        for j, p, gang in zip(jobs.tolist(), in_pool.tolist(), gangs, strict=True)
    ]
    parts = _JOB_PLACEMENTS.validate_python(rows)
    ends = np.searchsorted(block, np.arange(n_blocks + 1)).tolist()
    part_list = part_of.tolist()
    return [[parts[k] for k in part_list[ends[b] : ends[b + 1]]] for b in range(n_blocks)]


def build_horizon_plan(
    inputs: PlanInputs,
    plan: RoundedPlan,
    *,
    plan_id: str,
    policy: str,
    digest: str,
    solver: SolverInfo,
    objective: dict[str, float],
) -> HorizonPlan:
    services, jobs = _services_by_block(inputs, plan), _jobs_by_block(inputs, plan)
    firsts, counts = inputs.blocks.first_step.tolist(), inputs.blocks.n_steps.tolist()
    blocks = [
        PlanBlock(first_step=first, steps=count, services=services[b], jobs=jobs[b])
        for b, (first, count) in enumerate(zip(firsts, counts, strict=True))
    ]
    return HorizonPlan(
        cluster=inputs.cluster,
        plan_id=plan_id,
        policy=policy,
        issued_at=inputs.now,
        step_s=inputs.step_s,
        horizon_steps=inputs.horizon_steps,
        blocks=blocks,
        objective=objective,
        solver=solver,
        inputs_digest=digest,
    )


def _service_decisions(
    inputs: PlanInputs, plan: RoundedPlan, reasons: ReasonContext
) -> list[dict[str, object]]:
    """Step 0's capacity of every service in every pool it has replicas in now or in the plan."""
    replicas0 = plan.svc_replicas[:, :, 0]
    shown = ((replicas0 != 0) | (inputs.svc_replicas_now != 0)).nonzero()
    decisions: list[dict[str, object]] = []
    for s, p in zip(*(i.tolist() for i in shown), strict=True):
        replicas, gpus = int(replicas0[s, p]), float(plan.svc_gpus[s, p, 0])
        reason = reasons.service_reason(s, p, replicas, gpus)
        decisions.append(
            {
                "service": inputs.service_names[s],
                "pool": inputs.pool_names[p],
                "replicas": replicas,
                "gpus": gpus,
                "reason": reason.text,
                "cause": reason.cause,
            }
        )
    return decisions


def _job_decisions(
    inputs: PlanInputs, plan: RoundedPlan, reasons: ReasonContext, jobs: list[int]
) -> list[dict[str, object]]:
    """Step 0's decision for each of ``jobs``: run in a pool, preempt, or hold (one pass over
    the plan's step 0 as plain lists)."""
    at = np.asarray(jobs, dtype=np.int64)
    pools0, preempted = plan.job_pool[at, 0].tolist(), plan.preempted[at].tolist()
    gangs, running_in = inputs.job_gang[at].astype(int).tolist(), inputs.job_running_pool[at].tolist()
    decisions: list[dict[str, object]] = []
    for j, p, stopped, gang, was_in in zip(jobs, pools0, preempted, gangs, running_in, strict=True):
        if p >= 0:
            pool, gpus, why, action = inputs.pool_names[p], gang, reasons.run_reason(j, p), JobAction.RUN
        elif stopped:
            pool, gpus, why, action = (
                inputs.pool_names[was_in],
                0,
                reasons.preempt_reason(j),
                JobAction.PREEMPT,
            )
        else:
            pool, gpus, why, action = None, 0, reasons.hold_reason(j), JobAction.HOLD
        decision = {
            "job_id": inputs.job_ids[j],
            "action": action,
            "pool": pool,
            "gpus": gpus,
            "reason": why.text,
            "cause": why.cause,
        }
        if p >= 0 and was_in < 0 and (avoid := nodes_to_avoid(inputs, plan.outcome, j, p)):
            decision["avoid_nodes"] = avoid
        decisions.append(decision)
    # starts that must keep off nodes first: the cluster places what it is released in that order,
    # and work released before them may take the nodes they may use (business-hours: twelve short
    # jobs took nodes that stay up, and a 64-GPU gang kept off the three going out found no room)
    return sorted(decisions, key=lambda d: "avoid_nodes" not in d)


def nodes_to_avoid(inputs: PlanInputs, outcome: Step0Outcome, j: int, p: int) -> list[str]:
    """The named nodes of pool p that job j, started now, must keep off: those maintenance takes
    out before it would end and those held for heavier gangs as they drain. Step 0 placed it
    elsewhere, and the cluster must too (it places pods itself)."""
    names = inputs.pool_node_names[p] if p < len(inputs.pool_node_names) else ()
    nodes = set(inputs.nodes_out_before_end(j, p)) | outcome.kept_off.get(j, set())
    return [names[i] for i in sorted(nodes) if i < len(names)]


def held_nodes_by_pool(inputs: PlanInputs, outcome: Step0Outcome) -> dict[str, dict[str, float]]:
    """Per pool, the named nodes step 0 holds for gangs as they drain, with each gang's weight
    (jobs started on them later, as lending does, keep off those held for heavier work)."""
    out: dict[str, dict[str, float]] = {}
    for p, held in enumerate(outcome.held_for):
        names = inputs.pool_node_names[p] if p < len(inputs.pool_node_names) else ()
        named = {names[i]: float(inputs.job_weight[j]) for i, j in held.items() if i < len(names) and j >= 0}
        if named:
            out[inputs.pool_names[p]] = named
    return out


def build_allocation(
    inputs: PlanInputs, plan: RoundedPlan, *, plan_id: str, policy: str, fallback_reason: str | None
) -> Allocation:
    """Step 0's Allocation, validated as one record (its decisions built as plain fields first:
    one validation of the whole record instead of one per decision and again in the Allocation)."""
    jobs = inputs.active_jobs().tolist()
    reasons = ReasonContext.build(inputs, plan, jobs)
    return Allocation.model_validate(
        {
            "cluster": inputs.cluster,
            "plan_id": plan_id,
            "policy": policy,
            "issued_at": inputs.now,
            "step_s": inputs.step_s,
            "valid_until": inputs.now + timedelta(seconds=inputs.step_s),
            "services": _service_decisions(inputs, plan, reasons),
            "jobs": _job_decisions(inputs, plan, reasons, jobs),
            "fallback": fallback_reason is not None,
            "fallback_reason": fallback_reason,
        }
    )


def assemble_decision(
    inputs: PlanInputs,
    plan: RoundedPlan,
    *,
    plan_id: str,
    policy: str,
    digest: str,
    solver: SolverInfo,
    objective: dict[str, float],
) -> Decision:
    """The plan over the horizon and step 0's allocation, with a reason for every decision."""
    horizon = build_horizon_plan(
        inputs, plan, plan_id=plan_id, policy=policy, digest=digest, solver=solver, objective=objective
    )
    allocation = build_allocation(
        inputs, plan, plan_id=plan_id, policy=policy, fallback_reason=solver.fallback_reason
    )
    return Decision(plan=horizon, allocation=allocation)


def rewrite_step0(
    decision: Decision,
    *,
    step0_services: list[ServiceCapacity],
    step0_jobs: list[JobPlacement],
    services: list[ServiceDecision],
    jobs: list[JobDecision],
) -> Decision:
    """The decision with step 0 changed after the plan was made (lending headroom, bursting into
    idle GPUs): step 0's block of the plan replaced (a first block longer than step 0 is split, the
    rest keeping the plan's content) and the Allocation's decisions replaced. The parts come
    validated (built, or ``Part.revised``); the block, the plan and the Allocation are validated
    again as records, with their own checks (one job once, blocks tiling the horizon)."""
    plan, allocation = decision.plan, decision.allocation
    first = plan.blocks[0]
    step0 = PlanBlock(first_step=0, steps=1, services=step0_services, jobs=step0_jobs)
    rest = (
        [PlanBlock(first_step=1, steps=first.steps - 1, services=first.services, jobs=first.jobs)]
        if first.steps > 1
        else []
    )
    blocks = [step0, *rest, *plan.blocks[1:]]
    return Decision(
        plan=HorizonPlan.model_validate({**dict(plan), "blocks": blocks}),
        allocation=Allocation.model_validate({**dict(allocation), "services": services, "jobs": jobs}),
    )

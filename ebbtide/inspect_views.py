"""What ``ebbtide explain``, ``plan`` and ``status`` say, made from the loop's records (pure).

Each view takes records already read from the topics (Allocations, HorizonPlans, ClusterStates,
DeadLetters) and returns plain data that the command prints as rich tables or as JSON
(``--json``, for scripts). No I/O here: the tests feed records straight in, and the commands read
them from the broker (streams/inspect.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime, time, timedelta
from typing import Any

from schemas import Allocation, ClusterState, DeadLetter, HorizonPlan, PlanStep


class NotFound(LookupError):
    """What was asked about is in no record read; the message says what was looked for."""


def latest_for(records: Sequence[Any], cluster: str) -> Any | None:
    """The most recently issued record of ``cluster`` (by its time, then by its place on the topic)."""
    mine = [r for r in records if r.cluster == cluster]
    if not mine:
        return None
    return max(enumerate(mine), key=lambda pair: (_issued(pair[1]), pair[0]))[1]


def _issued(record: Any) -> datetime:
    issued: datetime = record.issued_at if hasattr(record, "issued_at") else record.as_of
    return issued


def explain_job(
    job_id: str,
    allocations: Sequence[Allocation],
    plans: Sequence[HorizonPlan],
    states: Sequence[ClusterState],
    cluster: str,
) -> dict[str, Any]:
    """Why ``job_id`` runs, waits or was stopped, from the latest Allocation; its planned start from
    that Allocation's HorizonPlan; and the last changes of its decision."""
    mine = [a for a in allocations if a.cluster == cluster]
    history = [(a, d) for a in mine for d in a.jobs if d.job_id == job_id]
    if not history:
        raise NotFound(f"job {job_id}: no Allocation of cluster {cluster} mentions it")
    allocation, decision = max(history, key=lambda pair: pair[0].issued_at)
    plan = next((p for p in plans if p.plan_id == allocation.plan_id), None)
    state = latest_for(states, cluster)
    job = next((j for j in state.jobs if j.spec.job_id == job_id), None) if state is not None else None
    return {
        "job_id": job_id,
        "cluster": cluster,
        "as_of": allocation.issued_at.isoformat(),
        "plan_id": allocation.plan_id,
        "action": decision.action.value,
        "pool": decision.pool,
        "gpus": decision.gpus,
        "reason": decision.reason,
        "cause": None if decision.cause is None else decision.cause.value,
        "fallback": allocation.fallback,
        "planned_start": _planned_start(job_id, plan),
        "status": job.status.value if job is not None else None,
        "submitted_at": job.submitted_at.isoformat() if job is not None else None,
        "gang_gpus": job.spec.gpus if job is not None else None,
        "changes": _changes(sorted(history, key=lambda pair: pair[0].issued_at)),
    }


def _planned_start(job_id: str, plan: HorizonPlan | None) -> dict[str, Any] | None:
    if plan is None:
        return None
    for block in plan.blocks:
        for placement in block.jobs:
            if placement.job_id == job_id:
                start = plan.step_start(block.first_step)
                return {"step": block.first_step, "start": start.isoformat(), "pool": placement.pool}
    return {"step": None, "start": None, "pool": None}  # not within the plan's horizon


def _changes(history: list[tuple[Allocation, Any]], keep: int = 10) -> list[dict[str, Any]]:
    changes: list[dict[str, Any]] = []
    for allocation, decision in history:
        key = (decision.action.value, decision.pool)
        if changes and (changes[-1]["action"], changes[-1]["pool"]) == key:
            continue
        changes.append(
            {
                "at": allocation.issued_at.isoformat(),
                "action": key[0],
                "pool": key[1],
                "reason": decision.reason,
            }
        )
    return changes[-keep:]


def plan_step_at(plan: HorizonPlan, at: time | None) -> PlanStep:
    """The plan's step holding the next ``at`` (time of day, UTC) from its issue; step 0 if None."""
    if at is None:
        return plan.step(0)
    issued = plan.issued_at
    wanted = datetime.combine(issued.date(), at, tzinfo=issued.tzinfo)
    if wanted < issued:
        wanted += timedelta(days=1)
    index = int((wanted - issued).total_seconds() // plan.step_s)
    if index < plan.horizon_steps:
        return plan.step(index)
    last = plan.step_start(plan.horizon_steps)
    raise NotFound(
        f"--at {at:%H:%M}: {wanted.isoformat()} is past the plan's horizon (ends {last.isoformat()})"
    )


def plan_view(plan: HorizonPlan, at: time | None) -> dict[str, Any]:
    """Capacity per service and pool, and the jobs planned, at one step of the plan; and the
    horizon in hours (service and batch GPUs at the start of each hour)."""
    step = plan_step_at(plan, at)
    return {
        "cluster": plan.cluster,
        "plan_id": plan.plan_id,
        "issued_at": plan.issued_at.isoformat(),
        "fallback": plan.solver.fallback,
        "step": step.index,
        "start": step.start.isoformat(),
        "services": [
            {"service": c.service, "pool": c.pool, "replicas": c.replicas, "gpus": c.gpus}
            for c in step.services
        ],
        "jobs": [{"job_id": j.job_id, "pool": j.pool, "gpus": j.gpus} for j in step.jobs],
        "hours": _hourly(plan),
    }


def _hourly(plan: HorizonPlan) -> list[dict[str, Any]]:
    per_hour = max(3600 // plan.step_s, 1)
    rows = []
    for step in plan.steps_expanded()[::per_hour]:
        rows.append(
            {
                "start": step.start.isoformat(),
                "service_gpus": round(sum(c.gpus for c in step.services), 2),
                "batch_gpus": sum(j.gpus for j in step.jobs),
                "jobs": len(step.jobs),
            }
        )
    return rows


def status_view(
    allocations: Sequence[Allocation],
    dead_letters: Sequence[DeadLetter],
    lag: Sequence[dict[str, Any]],
    cluster: str,
    now: datetime,
) -> dict[str, Any]:
    """The last step, recent fallbacks, consumer lag and dead letters by reason."""
    mine = sorted((a for a in allocations if a.cluster == cluster), key=lambda a: a.issued_at)
    last = mine[-1] if mine else None
    recent = mine[-96:]  # a day of 15-minute steps
    return {
        "cluster": cluster,
        "last_step": None
        if last is None
        else {
            "issued_at": last.issued_at.isoformat(),
            "age_s": round((now - last.issued_at).total_seconds(), 1),
            "plan_id": last.plan_id,
            "policy": last.policy,
            "fallback": last.fallback,
            "fallback_reason": last.fallback_reason,
        },
        "fallbacks": {
            "in_last_steps": sum(a.fallback for a in recent),
            "steps": len(recent),
            "in_a_row": _in_a_row(mine),
        },
        "lag": list(lag),
        "dead_letters": _dead_letters_by_reason(dead_letters),
    }


def _in_a_row(allocations: Sequence[Allocation]) -> int:
    count = 0
    for allocation in reversed(allocations):
        if not allocation.fallback:
            break
        count += 1
    return count


def _dead_letters_by_reason(dead_letters: Sequence[DeadLetter]) -> list[dict[str, Any]]:
    counts: Counter[tuple[str, str]] = Counter()
    last_at: dict[tuple[str, str], datetime] = {}
    for letter in dead_letters:
        key = (letter.source_topic, reason_of(letter.error))
        counts[key] += 1
        last_at[key] = max(last_at.get(key, letter.time), letter.time)
    return [
        {"source_topic": topic, "reason": reason, "count": n, "last_at": last_at[(topic, reason)].isoformat()}
        for (topic, reason), n in counts.most_common()
    ]


def reason_of(error: str) -> str:
    """A dead letter's reason without its particulars: the record type and the first field path
    ("JobEvent: spec.gpus"), so that records failing the same way count together."""
    head = ":".join(error.split(":", 2)[:2]).strip()
    return head[:100] or "unreadable record"

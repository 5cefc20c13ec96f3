"""Reasons a person can read for every step-0 decision, each made from a cause code.

Part of stage 6 of a decision (assembly, optimizer/plan_build.py): pure string building from the
inputs, the rounded plan and what step 0's placement saw (optimizer/step0_outcome.py). Each
decision gets a ``DecisionCause`` decided from those facts, never guessed, and its text is made
from the code and its numbers in one place (``TEMPLATES``, optimizer/reason_templates.py), so the
numbers a reason quotes (GPUs, weights, pools, quotas) are those of the allocation. A ReasonContext
works out once per decision what several reasons quote (each pool's note, each service's forecast
note, the GPUs in step 0).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

import numpy as np

from optimizer.deadlines import deadline_in_reach
from optimizer.inputs import PlanInputs
from optimizer.quota import borrowed, fits_quota
from optimizer.reason_templates import Reason, explain
from optimizer.rounding import EPS, RoundedPlan
from optimizer.step0_outcome import Blocked
from schemas import DecisionCause
from schemas.bounds import MAX_DURATION_S

C = DecisionCause


def _share(share: float) -> str:
    """A relaxed share as a reason prints it: the solver's values a tolerance below zero read 0.00
    (a reason said "share -0.00 of its gang")."""
    value = float(share)
    return f"{value if value > 0 else 0.0:.2f}"  # (max(-0.0, 0.0) is -0.0)


def _hhmm(inputs: PlanInputs, step: int) -> str:
    return f"{inputs.step_start(step):%H:%M}"


def _service_note(inputs: PlanInputs, s: int) -> str:
    """A service's forecast as its reasons quote it: now, its peak and when, and the model."""
    demand = inputs.svc_demand_steps[s]
    peak = int(demand.argmax())
    return (
        f"{inputs.service_names[s]} (forecast {inputs.svc_quantile[s]} = {demand[0]:.1f} GPUs now, "
        f"peak {demand[peak]:.1f} at {_hhmm(inputs, peak)}; {inputs.svc_forecast_model[s]})"
    )


def _gpu_hours(gpu_s: float) -> str:
    """GPU-seconds as GPU-hours a person reads: one decimal, two significant digits under one hour."""
    hours = gpu_s / 3600
    return f"{hours:.1f}" if hours >= 1 else f"{hours:.2g}"


def _pool_note(
    inputs: PlanInputs, p: int, svc_gpus0: np.ndarray, job_gpus0: float, free0: float, svc_notes: list[str]
) -> str:
    """What holds pool p's GPUs in step 0 (``svc_gpus0`` [S]: the services' GPUs there)."""
    parts = [f"pool {inputs.pool_names[p]}: {inputs.avail_steps[p, 0]:.0f} GPUs in service"]
    inference = float(np.ceil(svc_gpus0.sum() - EPS)) if inputs.n_services else 0.0
    if inference > EPS:
        most = svc_notes[int(svc_gpus0.argmax())]
        parts.append(f"{inference:.0f} reserved for inference, most for {most}")
    if job_gpus0 > 0:
        parts.append(f"{job_gpus0:.0f} held by running jobs")
    parts.append(f"{max(free0, 0):.0f} free")
    if inputs.window_reason[p]:
        parts.append(f"windows: {inputs.window_reason[p]}")
    return ", ".join(parts)


def _job_numbers(inputs: PlanInputs, jobs: list[int]) -> dict[int, dict[str, object]]:
    """The numbers every reason of a job quotes, for ``jobs``, in one pass over plain floats
    (formatting a numpy scalar costs several times a float's: at 200 jobs, the ``mid`` case of
    bench-decisions, the job reasons of one decision took 4.2 ms before this pass and 2.2 ms with
    it, back to back on the 2-core host)."""
    at = np.asarray(jobs, dtype=np.int64)
    columns = (inputs.job_gang, inputs.job_weight, inputs.job_left_gpu_s, inputs.job_lost_gpu_s)
    gang, weight, left, lost = (column[at].tolist() for column in columns)
    deadline = inputs.job_deadline_step[at].tolist()
    horizon = inputs.horizon_steps
    return {
        j: {
            "gpus": f"{gang[k]:.0f}",
            "weight": f"{weight[k]:g}",
            "cls": inputs.job_priority_class[j],
            "left_h": _gpu_hours(left[k]),
            "deadline": f"; deadline {_hhmm(inputs, deadline[k])}" if deadline[k] <= horizon else "",
            "lost_h": f"{lost[k] / 3600:.2f}",
        }
        for k, j in enumerate(jobs)
    }


def node_labels(inputs: PlanInputs, p: int, nodes: Iterable[int]) -> str:
    """Nodes of pool p (indices into its free GPUs by node) as a person finds them: by name where
    the cluster names them, else by index (#0, #1...)."""
    names = inputs.pool_node_names[p] if p < len(inputs.pool_node_names) else ()
    return ", ".join(names[n] if n < len(names) else f"#{n}" for n in sorted(nodes))


class HeldNodes(NamedTuple):
    """The nodes held for a gang as they drain: as its reasons quote them, and the seconds until
    they drain by their jobs' estimates (0: unknown)."""

    quoted: str
    drain_s: float


def _held_nodes(inputs: PlanInputs, plan: RoundedPlan) -> dict[int, HeldNodes]:
    """For each gang with nodes held for it as they drain, those nodes (the first pool that holds
    any, as step 0 recorded them)."""
    by_job: dict[int, tuple[int, list[int]]] = {}
    for p, held in enumerate(plan.outcome.held_for):
        for node, job in held.items():
            pool, nodes = by_job.setdefault(job, (p, []))
            if pool == p:
                nodes.append(node)
    out = {}
    for job, (p, nodes) in by_job.items():
        drain_s = max(plan.outcome.held_drain_s[p].get(node, 0.0) for node in nodes)
        where = f"node(s) {node_labels(inputs, p, nodes)} of pool {inputs.pool_names[p]}"
        out[job] = HeldNodes(f"; {where} held for it as they drain{_drained_by(inputs, drain_s)}", drain_s)
    return out


def _drained_by(inputs: PlanInputs, drain_s: float) -> str:
    """When held nodes drain by their running jobs' estimates, as reasons quote it: '' where unknown
    or past (jobs that overran their estimates, or inference replicas, may still hold them)."""
    if drain_s <= 0:
        return ""
    return f" (by {inputs.step_start(0) + timedelta(seconds=drain_s):%H:%M} by their jobs' estimates)"


@dataclass(frozen=True)
class ReasonContext:
    inputs: PlanInputs
    plan: RoundedPlan
    svc_gpus0: np.ndarray  # [S, P] the services' GPUs in step 0
    free0: np.ndarray  # [P] GPUs free in step 0
    team_used0: np.ndarray  # [teams] GPUs each team's jobs hold in step 0
    pool_notes: list[str]  # [P] what holds each pool's GPUs in step 0
    svc_notes: list[str]  # [S] each service's forecast as reasons quote it
    job_numbers: dict[int, dict[str, object]]  # the numbers each job's reasons quote
    first_block: list[int]  # [J] the first block the plan runs each job in, -1: none
    held_for: dict[int, HeldNodes]  # gang job -> the nodes held for it as they drain
    running_pool: list[int]  # [J] inputs.job_running_pool as a list
    preemptible: list[bool]  # [J] inputs.job_preemptible as a list

    @classmethod
    def build(cls, inputs: PlanInputs, plan: RoundedPlan, jobs: list[int]) -> ReasonContext:
        """The context for the reasons of ``jobs`` (job indices) and every service and pool."""
        n_pools = inputs.n_pools
        placed = plan.job_pool[:, 0] if inputs.n_jobs else np.zeros(0, dtype=np.int64)
        on = placed >= 0
        job_gpus0 = np.bincount(placed[on], weights=inputs.job_gang[on], minlength=n_pools)
        svc_gpus0 = plan.svc_gpus[:, :, 0] if inputs.n_services else np.zeros((0, n_pools))
        capacity0 = np.floor(inputs.avail_steps[:, 0] + EPS)
        free0 = capacity0 - np.ceil(svc_gpus0.sum(axis=0) - EPS) - job_gpus0
        team_used0 = np.bincount(
            inputs.job_team[on], weights=inputs.job_gang[on], minlength=len(inputs.team_names)
        )
        svc_notes = [_service_note(inputs, s) for s in range(inputs.n_services)]
        notes = [
            _pool_note(inputs, p, svc_gpus0[:, p], float(job_gpus0[p]), float(free0[p]), svc_notes)
            for p in range(n_pools)
        ]
        numbers = _job_numbers(inputs, jobs)
        planned = plan.job_pool >= 0
        first_block = np.where(planned.any(axis=1), planned.argmax(axis=1), -1).tolist()
        held_for = _held_nodes(inputs, plan)
        return cls(
            inputs,
            plan,
            svc_gpus0,
            free0,
            team_used0,
            notes,
            svc_notes,
            numbers,
            first_block,
            held_for,
            inputs.job_running_pool.tolist(),
            inputs.job_preemptible.tolist(),
        )

    def service_reason(self, s: int, p: int, replicas: int, gpus: float) -> Reason:
        """Why service s has ``replicas`` on ``gpus`` in pool p in step 0."""
        inp = self.inputs
        sliced = ""
        gpr = float(inp.svc_gpr[s])
        if replicas and gpus + EPS < replicas * gpr:
            k = replicas * gpr / max(gpus, EPS)
            sliced = (
                f"; time-sliced {k:.1f} tenants per GPU (limit {inp.svc_tenants[s, p]:.0f}), "
                f"{inp.svc_loss[s, p] * 100:.1f}% capacity lost per co-tenant"
            )
        short = float(inp.svc_demand_steps[s, 0]) - float(self.svc_gpus0[s].sum())
        cause = C.SHORT_OF_FORECAST if short > EPS else C.COVERS_FORECAST
        moving_to = self._moving_to(s, p)
        if moving_to is not None and cause == C.COVERS_FORECAST:
            cause = C.KEPT_WHILE_MOVING
        return explain(
            cause,
            replicas=replicas,
            gpus=f"{gpus + 0.0:g}",  # + 0.0: a solver's -0.0 reads "0"
            pool=inp.pool_names[p],
            service_note=self.svc_notes[s],
            sliced=sliced,
            short=f"{short:.1f}",
            pool_note=self.pool_notes[p],
            service=inp.service_names[s],
            added=moving_to[1] if moving_to else 0,
            to=moving_to[0] if moving_to else "",
        )

    def _moving_to(self, s: int, p: int) -> tuple[str, int] | None:
        """(pool, replicas) where service s adds the most replicas in step 0 while it keeps replicas
        it runs now in pool p and plans fewer there in block 1 (a move, kept until the new serve)."""
        inp, replicas = self.inputs, self.plan.svc_replicas
        if replicas.shape[2] < 2 or inp.svc_replicas_now[s, p] <= 0 or replicas[s, p, 1] >= replicas[s, p, 0]:
            return None
        added = replicas[s, :, 0] - inp.svc_replicas_now[s]
        added[p] = 0
        q = int(np.argmax(added))
        return (inp.pool_names[q], int(added[q])) if added[q] > 0 else None

    def _other_job(self, j: int) -> dict[str, object]:
        inp = self.inputs
        return {
            "for_job": inp.job_ids[j],
            "for_gpus": f"{inp.job_gang[j]:.0f}",
            "for_weight": f"{inp.job_weight[j]:g}",
        }

    def run_reason(self, j: int, p: int) -> Reason:
        inp, outcome = self.inputs, self.plan.outcome
        numbers = self.job_numbers[j] | {"pool": inp.pool_names[p], "pool_note": self.pool_notes[p]}
        if self.running_pool[j] != p:
            cause = C.BACKFILL if j in outcome.backfilled else C.PLANNED_START
            return explain(cause, share=_share(self.plan.job_share0[j, p]), **numbers)
        if not self.preemptible[j]:
            return explain(C.NOT_PREEMPTIBLE, **numbers)
        if j in outcome.kept_by_bound:
            share = _share(self.plan.job_share0[j, p])
            return explain(C.PREEMPTION_BOUND, share=share, bound=outcome.preemption_bound, **numbers)
        waits = ""
        if j in outcome.awaiting_checkpoint:
            waits = (
                "; the plan would stop it, but the stop waits for the checkpoint it writes within the step "
                f"(stopped now it would lose {numbers['lost_h']} GPU-h since its checkpoint plus restart)"
            )
        return explain(C.KEEPS_RUNNING, waits=waits, **numbers)

    def preempt_reason(self, j: int) -> Reason:
        inp, plan = self.inputs, self.plan
        p = int(inp.job_running_pool[j])
        numbers = self.job_numbers[j] | {"pool": inp.pool_names[p], "pool_note": self.pool_notes[p]}
        gang = plan.outcome.cleared_for.get(j)
        if gang is not None:
            nodes = node_labels(inp, p, inp.job_nodes.get(inp.job_ids[j], {}))
            return explain(C.CLEARED_FOR_JOB, nodes=nodes, **self._other_job(gang), **numbers)
        owner = plan.outcome.reclaimed_for.get(j)
        if owner is not None:
            return explain(C.QUOTA_RECLAIMED, others="", **self._quota_numbers(j, owner), **numbers)
        squeezed = j in plan.outcome.no_room  # the plan kept it: inference or a shrinking pool took its room
        starts = np.flatnonzero((plan.job_pool[:, 0] == p) & (inp.job_running_pool != p))
        if starts.size and not squeezed:
            top = int(starts[np.lexsort((starts, -inp.job_weight[starts]))][0])
            others = f" and {starts.size - 1} more" if starts.size > 1 else ""
            if self._reclaims_quota(j, top):
                return explain(C.QUOTA_RECLAIMED, others=others, **self._quota_numbers(j, top), **numbers)
            due = starts[deadline_in_reach(inp)[starts]]
            if due.size and inp.job_weight[top] <= inp.job_weight[j]:
                # no start outweighs it: the deadline is why; name the start due first
                first = int(due[np.lexsort((due, inp.job_deadline_step[due]))][0])
                when = _hhmm(inp, int(inp.job_deadline_step[first]))
                return explain(
                    C.FREED_FOR_DEADLINE,
                    others=others,
                    for_deadline=when,
                    **self._other_job(first),
                    **numbers,
                )
            if inp.job_weight[top] > inp.job_weight[j]:
                return explain(C.FREED_FOR_JOBS, others=others, **self._other_job(top), **numbers)
        return self._gone_to_inference_or_plan(j, p, numbers)

    def _gone_to_inference_or_plan(self, j: int, p: int, numbers: dict[str, object]) -> Reason:
        """A stop no start outweighs: a service growing in its pool, the pool shrinking, or else
        the plan's own share for it."""
        inp, plan = self.inputs, self.plan
        if inp.n_services:
            grows = plan.svc_replicas[:, p, 0] - inp.svc_replicas_now[:, p]
            s = int(grows.argmax())
            if grows[s] > 0:
                return explain(
                    C.FREED_FOR_INFERENCE,
                    service=inp.service_names[s],
                    service_note=self.svc_notes[s],
                    from_replicas=f"{inp.svc_replicas_now[s, p]:.0f}",
                    to_replicas=int(plan.svc_replicas[s, p, 0]),
                    **numbers,
                )
        if self.free0[p] < -EPS or inp.avail_steps[p, 0] + EPS < self._held_now(p):
            return explain(C.POOL_SHRINKS, **numbers)
        return explain(C.PLAN_STOPS, share=_share(plan.job_share0[j, p]), **numbers)

    def _held_now(self, p: int) -> float:
        """GPUs pool p's running jobs and services hold as the decision is made."""
        inp = self.inputs
        jobs = float(inp.job_gang[inp.job_running_pool == p].sum())
        return jobs + float((inp.svc_replicas_now[:, p] * inp.svc_gpr).sum()) if inp.n_services else jobs

    def _when(self, j: int) -> str:
        """When the plan starts job j, if within the horizon; for a gang with nodes held for it, not
        before they drain."""
        inp, b = self.inputs, self.first_block[j]
        step = int(inp.blocks.first_step[b]) if b >= 0 else -1
        if j in self.held_for and (b < 0 or inp.step_start(step) < self._drained_at(j)):
            # step 0 holds nodes because the relaxed plan starts it now; the rounded plan counts the
            # pool's GPUs, not its nodes, and may start it before they drain, or not at all
            return "to start once the nodes held for it have drained"
        if b < 0:
            return "not planned to start within the horizon"
        return f"planned to start at {_hhmm(inp, step)} in pool {inp.pool_names[self.plan.job_pool[j, b]]}"

    def _drained_at(self, j: int) -> datetime:
        """When the nodes held for gang j drain by their jobs' estimates (now where unknown)."""
        return self.inputs.step_start(0) + timedelta(seconds=self.held_for[j].drain_s)

    def hold_reason(self, j: int) -> Reason:
        inp = self.inputs
        if not inp.job_allowed[j].any():
            return explain(C.NO_ALLOWED_POOL)
        if inp.job_remaining_s[j] <= 0:
            return explain(C.NO_WORK_LEFT)
        held = self.held_for.get(j)
        numbers = self.job_numbers[j] | {"when": self._when(j), "held": held.quoted if held else ""}
        team = int(inp.job_team[j])
        if j in self.plan.outcome.went_first:
            gang, idle = self.plan.outcome.went_first[j]
            p = int(self.plan.job_pool[gang, 0])
            return explain(
                C.GANG_GOES_FIRST,
                **self._other_job(gang),
                idle=f"{idle:.0f}",
                pool=inp.pool_names[p],
                pool_note=self.pool_notes[p],
                **numbers,
            )
        blocked = self.plan.outcome.blocked.get(j) or self._untried(j)
        if blocked.cause == C.TEAM_QUOTA:
            lent = borrowed(self.team_used0.tolist(), inp.team_quota.tolist())
            return explain(
                C.TEAM_QUOTA,
                team=inp.team_names[team],
                quota=f"{inp.team_quota[team]:.0f}",
                used=f"{self.team_used0[team]:.0f}",
                lent=f", and {lent:.0f} of the {inp.quota_idle:.0f} GPUs idle quotas lend are borrowed"
                if inp.quota_idle
                else "",
                **numbers,
            )
        if blocked.cause == C.QUOTA_LENT:
            used, quota = self.team_used0.tolist(), inp.team_quota.tolist()
            return explain(
                C.QUOTA_LENT,
                team=inp.team_names[team],
                quota=f"{inp.team_quota[team]:.0f}",
                used=f"{self.team_used0[team]:.0f}",
                lent=f"{borrowed(used, quota):.0f}",
                **numbers,
            )
        p = blocked.pool
        numbers |= {
            "pool": inp.pool_names[p],
            "pool_note": self.pool_notes[p],
            "free": f"{self.free0[p]:.0f}",
        }
        # fragmentation where the pool still has the GPUs once step 0 is placed (work placed after
        # the gang's try may have taken some: then the pool is full)
        if blocked.cause == C.FRAGMENTATION and self.free0[p] + EPS >= inp.job_gang[j]:
            free = self.plan.outcome.node_free[p] or [0]
            per_node = inp.pool_gpus_per_node[p]
            return explain(C.FRAGMENTATION, largest=max(free), per_node=per_node, **numbers)
        if blocked.cause == C.NODES_HELD_FOR_GANG and blocked.gang >= 0:
            return explain(C.NODES_HELD_FOR_GANG, **self._other_job(blocked.gang), **numbers)
        if blocked.cause == C.NODES_GO_OUT:
            return explain(C.NODES_GO_OUT, **self._going_out(j, p), **numbers)
        return self._full_reason(j, p, numbers)

    def _going_out(self, j: int, p: int) -> dict[str, object]:
        """The nodes of pool p that go out for maintenance before job j would end (step 0 found
        those with room among them), when the first of them goes, and how long j would run (and
        the cluster's time limit, where that is what keeps it off them, or its first checkpoint,
        where it checkpoints before it would end: PlanInputs.exposed_s)."""
        inp = self.inputs
        run_s, holds_s, exposed_s = inp.run_s(j), inp.holds_nodes_s(j), inp.exposed_s(j)
        going = inp.nodes_out_before_end(j, p)
        first_s = min(inp.pool_node_out_s[p][i] for i in going)
        limit, before = "", "before it would end"
        if exposed_s < holds_s:
            limit, before = (
                f", first checkpoint after {exposed_s / 3600.0:.1f} h",
                "before its first checkpoint",
            )
        elif holds_s > run_s:
            limit = (
                ", no time limit" if holds_s >= MAX_DURATION_S else f", time limit {holds_s / 3600.0:.1f} h"
            )
        return {
            "run_h": f"{run_s / 3600.0:.1f}",
            "limit": limit,
            "before": before,
            "nodes": node_labels(inp, p, going),
            "at": f"{inp.now + timedelta(seconds=first_s):%H:%M}",
        }

    def _reclaims_quota(self, j: int, by: int) -> bool:
        """Job j's team holds more than its quota now (it borrows), and ``by``, of another team with
        a quota, starts."""
        inp = self.inputs
        mine, theirs = int(inp.job_team[j]), int(inp.job_team[by])
        running = (inp.job_running_pool >= 0) & (inp.job_team == mine)
        holds = float(inp.job_gang[running].sum())
        borrows = holds > inp.team_quota[mine] + EPS
        return bool(borrows and mine != theirs and np.isfinite(inp.team_quota[theirs]))

    def _quota_numbers(self, j: int, by: int) -> dict[str, object]:
        inp = self.inputs
        team = int(inp.job_team[j])
        return self._other_job(by) | {
            "team": inp.team_names[team],
            "quota": f"{inp.team_quota[team]:.0f}",
            "for_team": inp.team_names[int(inp.job_team[by])],
        }

    def _untried(self, j: int) -> Blocked:
        """Why a job step 0 never tried to start stayed out (no pool had a GPU left to try)."""
        inp = self.inputs
        team, allowed = int(inp.job_team[j]), np.flatnonzero(inp.job_allowed[j])
        used, quota = self.team_used0.tolist(), inp.team_quota.tolist()
        over_quota = not fits_quota(used, quota, inp.quota_idle, team, float(inp.job_gang[j]))
        return Blocked(
            C.TEAM_QUOTA if over_quota else C.POOL_FULL, int(allowed[np.argmax(self.free0[allowed])])
        )

    def _full_reason(self, j: int, p: int, numbers: dict[str, object]) -> Reason:
        """Pool p has too few GPUs for job j now: reserved for inference where, without the
        services' GPUs there, the gang would fit and the plan does not start it before the services
        give enough back (a start sooner is on GPUs running jobs free: the pool is full), else full."""
        inp = self.inputs
        gang = float(inp.job_gang[j])
        svc = self.plan.svc_gpus[:, p, :].sum(axis=0) if inp.n_services else np.zeros(inp.blocks.count)
        need = gang - float(self.free0[p])
        if inp.n_services and svc[0] > EPS and np.ceil(svc[0] - EPS) + EPS >= need:
            given_back = np.flatnonzero(svc <= svc[0] - need + EPS)
            given_back_block = int(given_back[0]) if given_back.size else inp.blocks.count
            if 0 <= self.first_block[j] < given_back_block:
                return explain(C.POOL_FULL, **numbers)
            if given_back.size:
                end = _hhmm(inp, int(inp.blocks.first_step[given_back_block]))
            else:  # a whole day ahead reads as the same clock time: say which end it is
                hours = inp.horizon_steps * inp.step_s / 3600
                end = f"the horizon's end ({hours:g} h from now)"
            most = int(self.svc_gpus0[:, p].argmax())
            return explain(
                C.RESERVED_FOR_SERVICE,
                start=_hhmm(inp, 0),
                end=end,
                service_note=self.svc_notes[most],
                **numbers,
            )
        return explain(C.POOL_FULL, **numbers)

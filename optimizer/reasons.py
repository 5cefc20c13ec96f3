"""Reasons a person can read for every step-0 decision: why run, why held, why preempted, why
this pool, and which forecast or constraint bound it. Pure string building from the rounded plan;
text that depends only on the values it shows (a job's head, a formatted number) is kept in a dict
the planner holds between decisions, since formatting floats is most of the cost. What a job's
reasons read from the inputs alone (``JobFacts``, the services' forecast notes included) needs
nothing from the solve, so the planner gathers it, with the reasons of the jobs that keep running,
while HiGHS solves (optimizer/alongside.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from optimizer.inputs import PlanInputs
from optimizer.rounding import EPS, RoundedPlan


@dataclass(frozen=True)
class JobFacts:
    """What the reasons read from the inputs alone: job arrays as Python lists (formatting numpy
    scalars one by one is slow), the services' demand and forecast notes, the kept texts, clock
    times by step. Nothing here depends on the solve, so ``of`` can run while HiGHS solves;
    ``run_text`` is then all a job that keeps running in its pool needs."""

    inputs: PlanInputs
    running_pool: list[int]
    gang: list[float]
    weight: list[float]
    remaining_s: list[float]
    deadline_step: list[int]
    active: list[int]  # indices of the real jobs (PlanInputs.active_jobs)
    # what the services' reasons read from the inputs (ReasonContext)
    svc_gpr: list[float]  # [S] GPUs per replica
    svc_demand0: list[float]  # [S] demand in step 0 at the SLO quantile
    svc_peak_step: list[int]  # [S] the step of each service's highest demand (the first of equals)
    capacity0: np.ndarray  # [P] whole GPUs in service in step 0
    service_notes: list[str]  # [S] each service's forecast, as its reasons quote it
    texts: dict[tuple[object, ...], str] = field(default_factory=dict)
    """Text that depends only on the values in its key, kept across decisions by the caller."""
    _times: dict[int, str] = field(default_factory=dict)

    @classmethod
    def of(cls, inputs: PlanInputs, texts: dict[tuple[object, ...], str] | None = None) -> JobFacts:
        """``texts``: a dict the caller keeps between decisions (see ``texts``), or None."""
        demand = inputs.svc_demand_steps
        facts = cls(
            inputs,
            running_pool=inputs.job_running_pool.tolist(),
            gang=inputs.job_gang.tolist(),
            weight=inputs.job_weight.tolist(),
            remaining_s=inputs.job_remaining_s.tolist(),
            deadline_step=inputs.job_deadline_step.tolist(),
            active=inputs.active_jobs().tolist(),
            svc_gpr=inputs.svc_gpr.tolist(),
            svc_demand0=demand[:, 0].tolist() if demand.size else [],
            # one argmax for all services: every service shown needs its note, every decision
            svc_peak_step=demand.argmax(axis=1).tolist() if demand.size else [0] * inputs.n_services,
            capacity0=np.floor(inputs.avail_steps[:, 0] + EPS),
            service_notes=[],
            texts={} if texts is None else texts,
        )
        # every service's note now: they read the inputs alone, and this runs while HiGHS solves
        facts.service_notes.extend(facts._service_note(s) for s in range(inputs.n_services))
        return facts

    def _service_note(self, s: int) -> str:
        inp = self.inputs
        peak = self.svc_peak_step[s]
        return (
            f"{inp.service_names[s]} (forecast {inp.svc_quantile[s]} = {self.svc_demand0[s]:.1f} GPUs now, "
            f"peak {inp.svc_demand_steps[s, peak]:.1f} at {self.hhmm(peak)}; "
            f"{inp.svc_forecast_model[s]})"
        )

    def hhmm(self, step: int) -> str:
        text = self._times.get(step)
        if text is None:
            at = self.inputs.step_start(step)
            text = self._times[step] = f"{at.hour:02d}:{at.minute:02d}"  # as %H:%M, without strftime
        return text

    def number(self, value: float, spec: str) -> str:
        """``format(value, spec)``, kept across decisions: formatting a float costs far more than
        a lookup, and the planner's numbers (GPU counts, whole steps of work) repeat. Zero is
        never kept (-0.0 equals 0.0 as a key but formats with its sign)."""
        if not value:
            return format(value, spec)
        key = (spec, value)
        text = self.texts.get(key)
        if text is None:
            text = self.texts[key] = format(value, spec)
        return text

    def _run_head(self, key: tuple[Any, ...]) -> str:
        """The start of a run reason: the same for a job's whole life in a pool, so made once.
        ``key``: ("run", kept, pool, gang, weight, priority class), as ``run_text`` looks it up."""
        text = self.texts.get(key)
        if text is None:
            _, kept, pool, gang, weight, priority_class = key
            head = "run: keeps running" if kept else "run: starts"
            text = self.texts[key] = (
                f"{head} in pool {pool} ({gang:.0f} GPUs, weight {weight:g}, class {priority_class}); "
            )
        return text

    def run_text(self, j: int, p: int, kept: bool) -> str:
        """Job j's run reason in pool p up to what the plan adds to a start (all of a kept job's)."""
        inp, texts = self.inputs, self.texts
        # most jobs run on in their pool: their head and hours left are found in ``texts`` here,
        # without the calls (``_run_head`` and ``number`` make them, once; text is never empty)
        head_key = ("run", kept, inp.pool_names[p], self.gang[j], self.weight[j], inp.job_priority_class[j])
        head = texts.get(head_key) or self._run_head(head_key)
        hours = self.remaining_s[j] / 3600
        text = f"{head}{texts.get(('.1f', hours)) or self.number(hours, '.1f')} GPU-h left"
        deadline = self.deadline_step[j]  # a Python int already (from tolist of an integer array)
        if deadline <= inp.horizon_steps:
            text += f"; deadline {self.hhmm(deadline)}"
        return text


@dataclass(frozen=True)
class ReasonContext:
    inputs: PlanInputs
    plan: RoundedPlan
    facts: JobFacts
    job_gpus0: np.ndarray  # [P] GPUs given to jobs in step 0
    svc_gpus0: np.ndarray  # [S, P]
    free0: np.ndarray  # [P]
    svc_covered0: list[float]  # [S] GPUs the plan gives each service in step 0, all pools
    _pool_notes: dict[int, str] = field(default_factory=dict)  # by pool index
    _best: dict[tuple[str, bytes], int] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        inputs: PlanInputs,
        plan: RoundedPlan,
        texts: dict[tuple[object, ...], str] | None = None,
        facts: JobFacts | None = None,
    ) -> ReasonContext:
        """``texts``: a dict the caller keeps between decisions (see JobFacts.texts), or None;
        ``facts``: JobFacts.of(inputs, texts) when made ahead (then ``texts`` is theirs)."""
        if facts is None:
            facts = JobFacts.of(inputs, texts)
        elif facts.inputs is not inputs:
            raise ValueError("job facts of other inputs")
        n_pools = inputs.n_pools
        placed = plan.job_pool[:, 0] if inputs.n_jobs else np.zeros(0, dtype=np.int64)
        on = placed >= 0
        gang_on = inputs.job_gang[on]
        job_gpus0 = np.bincount(placed[on], weights=gang_on, minlength=n_pools)
        svc_gpus0 = plan.svc_gpus[:, :, 0] if inputs.n_services else np.zeros((0, n_pools))
        free0 = facts.capacity0 - np.ceil(svc_gpus0.sum(axis=0) - EPS) - job_gpus0
        # each service's GPUs over all pools, summed on a contiguous copy: every row then adds
        # up in the order its own 1-D slice would (an axis-1 sum of the strided view may not)
        covered0 = np.ascontiguousarray(svc_gpus0).sum(axis=1)
        return cls(
            inputs,
            plan,
            facts,
            job_gpus0,
            svc_gpus0,
            free0,
            svc_covered0=covered0.tolist(),
        )

    @cached_property
    def team_used0(self) -> np.ndarray:
        """[teams] GPUs each team's jobs hold in step 0; only held jobs need it, so made on first use."""
        inputs = self.inputs
        placed = self.plan.job_pool[:, 0] if inputs.n_jobs else np.zeros(0, dtype=np.int64)
        on = placed >= 0
        return np.bincount(inputs.job_team[on], weights=inputs.job_gang[on], minlength=len(inputs.team_names))

    def pool_note(self, p: int) -> str:
        """What holds pool p's GPUs in step 0."""
        text = self._pool_notes.get(p)
        if text is None:
            text = self._pool_notes[p] = self._make_pool_note(p)
        return text

    def _make_pool_note(self, p: int) -> str:
        inp = self.inputs
        number = self.facts.number
        parts = [f"pool {inp.pool_names[p]}: {number(inp.avail_steps[p, 0], '.0f')} GPUs in service"]
        column = self.svc_gpus0[:, p]
        inference = column.sum() if inp.n_services else 0.0
        if inp.n_services and inference > EPS:
            s = int(column.argmax())
            most = self.facts.service_notes[s]
            parts.append(f"{number(inference, '.0f')} reserved for inference, most for {most}")
        if self.job_gpus0[p] > 0:
            parts.append(f"{number(self.job_gpus0[p], '.0f')} running jobs")
        parts.append(f"{number(max(self.free0[p], 0), '.0f')} free")
        if inp.window_reason[p]:
            parts.append(f"windows: {inp.window_reason[p]}")
        return ", ".join(parts)

    def service_reason(self, s: int, p: int, replicas: int | None = None, gpus: float | None = None) -> str:
        """Why service s has ``replicas`` on ``gpus`` in pool p in step 0 (None: the plan's)."""
        inp, plan = self.inputs, self.plan
        replicas = int(plan.svc_replicas[s, p, 0]) if replicas is None else replicas
        gpus = float(plan.svc_gpus[s, p, 0]) if gpus is None else gpus
        # the GPU count is looked up here, without the call (``facts.number`` makes it, once; the
        # text is never empty); the service's note was made with the facts
        shown_gpus = self.facts.texts.get(("g", gpus)) or self.facts.number(gpus, "g")
        note = self.facts.service_notes[s]
        text = f"{replicas} replicas on {shown_gpus} GPUs in pool {inp.pool_names[p]}: covers {note}"
        gpus_per_replica = self.facts.svc_gpr[s]
        if replicas and gpus + EPS < replicas * gpus_per_replica:
            k = replicas * gpus_per_replica / max(gpus, EPS)
            text += (
                f"; time-sliced {k:.1f} tenants per GPU (limit {inp.svc_tenants[s, p]:.0f}), "
                f"{inp.svc_loss[s, p] * 100:.1f}% capacity lost per co-tenant"
            )
        covered, demand = self.svc_covered0[s], self.facts.svc_demand0[s]
        if covered + EPS < demand:
            text += f"; short by {demand - covered:.1f} GPUs: allowed pools are full"
        return text

    def run_reason(self, j: int, p: int) -> str:
        kept = self.facts.running_pool[j] == p
        text = self.facts.run_text(j, p, kept)
        if not kept:
            text += f"; plan share now {self.plan.job_share0[j, p]:.2f}; {self.pool_note(p)}"
        return text

    def preempt_reason(self, j: int) -> str:
        inp = self.inputs
        p = int(inp.job_running_pool[j])
        return (
            f"preempted: {self.pool_note(p)}; its {inp.job_gang[j]:.0f} GPUs go to higher-value work "
            f"(weight {inp.job_weight[j]:g}); loses {inp.job_lost_gpu_s[j] / 3600:.2f} GPU-h "
            "(since checkpoint plus restart)"
        )

    @cached_property
    def _first_planned_block(self) -> list[Any]:
        """Per job, the first block the plan runs it in (-1: none), for every job at once."""
        planned = self.plan.job_pool >= 0
        at = np.argmax(planned, axis=1) if planned.size else np.zeros(planned.shape[0], dtype=np.int64)
        first: list[Any] = np.where(planned.any(axis=1), at, -1).tolist()
        return first

    def _best_pool(self, j: int) -> int:
        """The allowed pool with most free GPUs in step 0 (-1: none allowed); one per allowed set."""
        key = ("best", self.inputs.job_allowed[j].tobytes())
        best = self._best.get(key)
        if best is None:
            allowed = np.flatnonzero(self.inputs.job_allowed[j])
            best = self._best[key] = int(allowed[np.argmax(self.free0[allowed])]) if allowed.size else -1
        return best

    def hold_reason(self, j: int) -> str:
        inp, plan = self.inputs, self.plan
        best = self._best_pool(j)
        if best < 0:
            return "held: no pool matches the job's allowed pools and GPU types"
        if self.facts.remaining_s[j] <= 0:
            return "held: no work left by its own estimate"
        team = int(inp.job_team[j])
        b = int(self._first_planned_block[j])
        if b >= 0:
            step = int(inp.blocks.first_step[b])
            when = (
                f"planned to start at {self.facts.hhmm(step)} in pool {inp.pool_names[plan.job_pool[j, b]]}"
            )
        else:
            when = "not planned to start within the horizon"
        gang = self.facts.gang[j]
        if self.team_used0[team] + gang > inp.team_quota[team] + EPS:
            return (
                f"held: team {inp.team_names[team]} is at its quota of {inp.team_quota[team]:.0f} GPUs "
                f"({self.team_used0[team]:.0f} in use); {when}"
            )
        if self.free0[best] + EPS < gang:
            bound = f"needs a gang of {gang:.0f} GPUs; {self.pool_note(best)}"
        else:
            bound = (
                f"{self.free0[best]:.0f} GPUs are free in pool {inp.pool_names[best]} now but the plan "
                f"keeps them for coming demand or work of higher value; {self.pool_note(best)}"
            )
        return f"held: {when}; {bound}"

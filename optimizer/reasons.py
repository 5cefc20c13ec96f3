"""Reasons a person can read for every step-0 decision: why run, why held, why preempted, why
this pool, and which forecast or constraint bound it.

Part of stage 6 of a decision (assembly, optimizer/plan_build.py): pure string building from the
inputs and the rounded plan. A ReasonContext works out once per decision what several reasons
quote (each pool's note, each service's forecast note, the GPUs in use in step 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from optimizer.inputs import PlanInputs
from optimizer.rounding import EPS, RoundedPlan


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


def _pool_note(inputs: PlanInputs, p: int, svc_gpus0: np.ndarray, job_gpus0: float, free0: float) -> str:
    """What holds pool p's GPUs in step 0 (``svc_gpus0`` [S]: the services' GPUs there)."""
    parts = [f"pool {inputs.pool_names[p]}: {inputs.avail_steps[p, 0]:.0f} GPUs in service"]
    inference = float(svc_gpus0.sum()) if inputs.n_services else 0.0
    if inference > EPS:
        most = _service_note(inputs, int(svc_gpus0.argmax()))
        parts.append(f"{inference:.0f} reserved for inference, most for {most}")
    if job_gpus0 > 0:
        parts.append(f"{job_gpus0:.0f} running jobs")
    parts.append(f"{max(free0, 0):.0f} free")
    if inputs.window_reason[p]:
        parts.append(f"windows: {inputs.window_reason[p]}")
    return ", ".join(parts)


@dataclass(frozen=True)
class ReasonContext:
    inputs: PlanInputs
    plan: RoundedPlan
    svc_gpus0: np.ndarray  # [S, P] the services' GPUs in step 0
    free0: np.ndarray  # [P] GPUs free in step 0
    team_used0: np.ndarray  # [teams] GPUs each team's jobs hold in step 0
    pool_notes: list[str]  # [P] what holds each pool's GPUs in step 0

    @classmethod
    def build(cls, inputs: PlanInputs, plan: RoundedPlan) -> ReasonContext:
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
        notes = [
            _pool_note(inputs, p, svc_gpus0[:, p], float(job_gpus0[p]), float(free0[p]))
            for p in range(n_pools)
        ]
        return cls(inputs, plan, svc_gpus0, free0, team_used0, notes)

    def service_reason(self, s: int, p: int, replicas: int, gpus: float) -> str:
        """Why service s has ``replicas`` on ``gpus`` in pool p in step 0."""
        inp = self.inputs
        note = _service_note(inp, s)
        text = f"{replicas} replicas on {gpus:g} GPUs in pool {inp.pool_names[p]}: covers {note}"
        gpr = float(inp.svc_gpr[s])
        if replicas and gpus + EPS < replicas * gpr:
            k = replicas * gpr / max(gpus, EPS)
            text += (
                f"; time-sliced {k:.1f} tenants per GPU (limit {inp.svc_tenants[s, p]:.0f}), "
                f"{inp.svc_loss[s, p] * 100:.1f}% capacity lost per co-tenant"
            )
        covered = float(self.svc_gpus0[s].sum())
        demand = float(inp.svc_demand_steps[s, 0])
        if covered + EPS < demand:
            text += f"; short by {demand - covered:.1f} GPUs: allowed pools are full"
        return text

    def run_reason(self, j: int, p: int) -> str:
        inp = self.inputs
        kept = int(inp.job_running_pool[j]) == p
        head = "run: keeps running" if kept else "run: starts"
        text = (
            f"{head} in pool {inp.pool_names[p]} ({inp.job_gang[j]:.0f} GPUs, weight {inp.job_weight[j]:g}, "
            f"class {inp.job_priority_class[j]}); {inp.job_remaining_s[j] / 3600:.1f} GPU-h left"
        )
        deadline = int(inp.job_deadline_step[j])
        if deadline <= inp.horizon_steps:
            text += f"; deadline {_hhmm(inp, deadline)}"
        if not kept:
            text += f"; plan share now {self.plan.job_share0[j, p]:.2f}; {self.pool_notes[p]}"
        return text

    def preempt_reason(self, j: int) -> str:
        inp = self.inputs
        p = int(inp.job_running_pool[j])
        return (
            f"preempted: {self.pool_notes[p]}; its {inp.job_gang[j]:.0f} GPUs go to higher-value work "
            f"(weight {inp.job_weight[j]:g}); loses {inp.job_lost_gpu_s[j] / 3600:.2f} GPU-h "
            "(since checkpoint plus restart)"
        )

    def _when(self, j: int) -> str:
        """When the plan starts job j, if within the horizon."""
        inp, planned = self.inputs, self.plan.job_pool[j] >= 0
        if not planned.any():
            return "not planned to start within the horizon"
        b = int(planned.argmax())
        step = int(inp.blocks.first_step[b])
        return f"planned to start at {_hhmm(inp, step)} in pool {inp.pool_names[self.plan.job_pool[j, b]]}"

    def hold_reason(self, j: int) -> str:
        inp = self.inputs
        allowed = np.flatnonzero(inp.job_allowed[j])
        if not allowed.size:
            return "held: no pool matches the job's allowed pools and GPU types"
        if inp.job_remaining_s[j] <= 0:
            return "held: no work left by its own estimate"
        best = int(allowed[np.argmax(self.free0[allowed])])  # the allowed pool with most free GPUs
        team, gang, when = int(inp.job_team[j]), float(inp.job_gang[j]), self._when(j)
        if self.team_used0[team] + gang > inp.team_quota[team] + EPS:
            return (
                f"held: team {inp.team_names[team]} is at its quota of {inp.team_quota[team]:.0f} GPUs "
                f"({self.team_used0[team]:.0f} in use); {when}"
            )
        if self.free0[best] + EPS < gang:
            bound = f"needs a gang of {gang:.0f} GPUs; {self.pool_notes[best]}"
        else:
            bound = (
                f"{self.free0[best]:.0f} GPUs are free in pool {inp.pool_names[best]} now but the plan "
                f"keeps them for coming demand or work of higher value; {self.pool_notes[best]}"
            )
        return f"held: {when}; {bound}"

"""Reasons a person can read for every step-0 decision: why run, why held, why preempted, why
this pool, and which forecast or constraint bound it. Pure string building from the rounded plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from optimizer.inputs import PlanInputs
from optimizer.rounding import EPS, RoundedPlan


@dataclass(frozen=True)
class ReasonContext:
    inputs: PlanInputs
    plan: RoundedPlan
    job_gpus0: np.ndarray  # [P] GPUs given to jobs in step 0
    svc_gpus0: np.ndarray  # [S, P]
    free0: np.ndarray  # [P]
    team_used0: np.ndarray  # [teams]
    _notes: dict[tuple[str, int], str] = field(default_factory=dict)

    @classmethod
    def build(cls, inputs: PlanInputs, plan: RoundedPlan) -> ReasonContext:
        n_pools = inputs.n_pools
        placed = plan.job_pool[:, 0] if inputs.n_jobs else np.zeros(0, dtype=np.int64)
        on = placed >= 0
        job_gpus0 = np.bincount(placed[on], weights=inputs.job_gang[on], minlength=n_pools)
        svc_gpus0 = plan.svc_gpus[:, :, 0] if inputs.n_services else np.zeros((0, n_pools))
        free0 = np.floor(inputs.avail_steps[:, 0] + EPS) - np.ceil(svc_gpus0.sum(axis=0) - EPS) - job_gpus0
        team_used0 = np.bincount(
            inputs.job_team[on], weights=inputs.job_gang[on], minlength=len(inputs.team_names)
        )
        return cls(inputs, plan, job_gpus0, svc_gpus0, free0, team_used0)

    def _hhmm(self, step: int) -> str:
        return f"{self.inputs.step_start(step):%H:%M}"

    def _service_note(self, s: int) -> str:
        key = ("service", s)
        if key not in self._notes:
            self._notes[key] = self._make_service_note(s)
        return self._notes[key]

    def pool_note(self, p: int) -> str:
        """What holds pool p's GPUs in step 0."""
        key = ("pool", p)
        if key not in self._notes:
            self._notes[key] = self._make_pool_note(p)
        return self._notes[key]

    def _make_service_note(self, s: int) -> str:
        inp = self.inputs
        curve = inp.svc_demand_steps[s]
        peak = int(np.argmax(curve)) if curve.size else 0
        return (
            f"{inp.service_names[s]} (forecast {inp.svc_quantile[s]} = {curve[0]:.1f} GPUs now, "
            f"peak {curve[peak]:.1f} at {self._hhmm(peak)}; {inp.svc_forecast_model[s]})"
        )

    def _make_pool_note(self, p: int) -> str:
        inp = self.inputs
        parts = [f"pool {inp.pool_names[p]}: {inp.avail_steps[p, 0]:.0f} GPUs in service"]
        if inp.n_services and self.svc_gpus0[:, p].sum() > EPS:
            s = int(np.argmax(self.svc_gpus0[:, p]))
            parts.append(
                f"{self.svc_gpus0[:, p].sum():.0f} reserved for inference, most for {self._service_note(s)}"
            )
        if self.job_gpus0[p] > 0:
            parts.append(f"{self.job_gpus0[p]:.0f} running jobs")
        parts.append(f"{max(self.free0[p], 0):.0f} free")
        if inp.window_reason[p]:
            parts.append(f"windows: {inp.window_reason[p]}")
        return ", ".join(parts)

    def service_reason(self, s: int, p: int) -> str:
        inp, plan = self.inputs, self.plan
        replicas = int(plan.svc_replicas[s, p, 0])
        gpus = float(plan.svc_gpus[s, p, 0])
        where = f"{replicas} replicas on {gpus:g} GPUs in pool {inp.pool_names[p]}"
        text = f"{where}: covers {self._service_note(s)}"
        if replicas and gpus + EPS < replicas * inp.svc_gpr[s]:
            k = replicas * inp.svc_gpr[s] / max(gpus, EPS)
            text += (
                f"; time-sliced {k:.1f} tenants per GPU (limit {inp.svc_tenants[s, p]:.0f}), "
                f"{inp.svc_loss[s, p] * 100:.1f}% capacity lost per co-tenant"
            )
        covered = float(plan.svc_gpus[s, :, 0].sum())
        if covered + EPS < inp.svc_demand_steps[s, 0]:
            text += f"; short by {inp.svc_demand_steps[s, 0] - covered:.1f} GPUs: allowed pools are full"
        return text

    def run_reason(self, j: int, p: int) -> str:
        inp = self.inputs
        head = "run: keeps running" if inp.job_running_pool[j] == p else "run: starts"
        text = (
            f"{head} in pool {inp.pool_names[p]} ({inp.job_gang[j]:.0f} GPUs, weight "
            f"{inp.job_weight[j]:g}, class {inp.job_priority_class[j]}); "
            f"{inp.job_remaining_s[j] / 3600:.1f} GPU-h left"
        )
        if inp.job_deadline_step[j] <= inp.horizon_steps:
            text += f"; deadline {self._hhmm(int(inp.job_deadline_step[j]))}"
        if inp.job_running_pool[j] != p:
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

    def hold_reason(self, j: int) -> str:
        inp, plan = self.inputs, self.plan
        allowed = np.flatnonzero(inp.job_allowed[j])
        if allowed.size == 0:
            return "held: no pool matches the job's allowed pools and GPU types"
        if inp.job_remaining_s[j] <= 0:
            return "held: no work left by its own estimate"
        team = int(inp.job_team[j])
        later = np.flatnonzero(plan.job_pool[j] >= 0)
        if later.size:
            b = int(later[0])
            step = int(inp.blocks.first_step[b])
            when = f"planned to start at {self._hhmm(step)} in pool {inp.pool_names[plan.job_pool[j, b]]}"
        else:
            when = "not planned to start within the horizon"
        if self.team_used0[team] + inp.job_gang[j] > inp.team_quota[team] + EPS:
            return (
                f"held: team {inp.team_names[team]} is at its quota of {inp.team_quota[team]:.0f} GPUs "
                f"({self.team_used0[team]:.0f} in use); {when}"
            )
        best = allowed[np.argmax(self.free0[allowed])]
        if self.free0[best] + EPS < inp.job_gang[j]:
            bound = f"needs a gang of {inp.job_gang[j]:.0f} GPUs; {self.pool_note(int(best))}"
        else:
            bound = (
                f"{self.free0[best]:.0f} GPUs are free in pool {inp.pool_names[best]} now but the plan "
                f"keeps them for coming demand or work of higher value; {self.pool_note(int(best))}"
            )
        return f"held: {when}; {bound}"

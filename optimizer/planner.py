"""PlannerPolicy: the receding-horizon planner behind the Policy interface (``ebbtide``, ``oracle``).

Each decision: inputs -> model structure (cached while the job set, services and pools stay the
same) -> parameters -> HiGHS (persistent, warm-started) -> rounding -> HorizonPlan + Allocation
with reasons. Only step 0 is committed. On time-out, infeasibility or any error the planner
publishes a flagged fallback (the last plan shifted by one step, else a greedy plan) with the
reason; nothing escapes ``decide``. No I/O, and ``now`` is an argument: the only clock is the
decision's own time budget (``time_limit_s``), of which the solve gets what is left after the
model is built, less what the last decision needed after its solve. The policy object keeps the
solver session and the last plan between calls (warm start, fallback).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime

import numpy as np

from loop import Decision, config_fingerprint, inputs_digest, plan_id_for
from optimizer.alongside import Alongside
from optimizer.basis_carry import carried_indices
from optimizer.calibration import BandCalibrator
from optimizer.config import PlannerConfig
from optimizer.extract import extract_plan, round_relaxed
from optimizer.fallback import greedy_plan, keep_current_state, shifted_preferences
from optimizer.formulation import ModelStructure, build_structure, slots_match, structure_key, update_gangs
from optimizer.headroom import lend_headroom
from optimizer.inputs import PlanInputs, build_inputs, make_blocks
from optimizer.nodes import NodeHolds
from optimizer.parameters import Parameters, fill_parameters
from optimizer.plan_build import (
    AllocationAhead,
    PartCache,
    allocation_ahead,
    build_allocation,
    build_horizon_plan,
    step_shells,
)
from optimizer.rounding import RoundedPlan
from optimizer.slots import SlotTable, into_slots
from optimizer.solve_highs import HighsSession, SolveOutcome
from schemas import ClusterState, DemandForecast, HorizonPlan, PlanStep, SolverInfo

MIN_SOLVE_SHARE = 0.25
"""The solve always gets at least this share of the decision's budget."""
FIRST_POST_SOLVE_SHARE = 0.1
"""Before any decision was measured, the work after the solve is taken to need this share."""

_OBJECTIVE_GROUPS = {
    "work_value": ("y0", "yb"),
    "shortfall": ("short",),
    "min_replica_shortfall": ("minshort",),
    "preemption": ("pre",),
    "service_gpus_and_interference": ("R", "G"),
    "churn": ("up0", "up"),
}


def objective_columns(structure: ModelStructure) -> dict[str, np.ndarray]:
    """The columns of each objective term (fixed for a structure's life)."""
    return {
        name: np.concatenate([structure.cols[g].ravel() for g in groups])
        for name, groups in _OBJECTIVE_GROUPS.items()
    }


def objective_terms(
    structure: ModelStructure,
    params: Parameters,
    x: np.ndarray,
    columns: dict[str, np.ndarray] | None = None,
) -> dict[str, float]:
    """The objective split by term; ``columns``: objective_columns(structure), when kept."""
    columns = columns if columns is not None else objective_columns(structure)
    terms = {name: float(params.cost[idx] @ x[idx]) for name, idx in columns.items()}
    terms["work_value"] = -terms["work_value"]
    return terms


class PlannerPolicy:
    """The optimizer as a Policy. ``name`` only labels its output."""

    def __init__(self, name: str = "ebbtide", config: PlannerConfig | None = None) -> None:
        self.name = name
        self.config = config or PlannerConfig()
        self._fingerprint = config_fingerprint(self.config)
        self._blocks = make_blocks(self.config, self.config.horizon_steps, self.config.step_s)
        self._session = HighsSession()
        self._structure: ModelStructure | None = None
        self._structure_ids: tuple[str, ...] = ()  # job id of each slot in the last solved model
        self._objective_columns: dict[str, np.ndarray] = {}
        self._slots = SlotTable()
        self._last_plan: HorizonPlan | None = None
        self._parts = PartCache()
        self._calibrator = BandCalibrator()
        self._holds: NodeHolds = {}
        self._post_solve_s = FIRST_POST_SOLVE_SHARE * self.config.time_limit_s
        self._solve_end = 0.0
        self.last_solver_ms = 0.0

    def session_stats(self) -> dict[str, int]:
        """How often the solver model was rebuilt versus updated in place (warm start)."""
        return {"rebuilds": self._session.rebuilds, "updates": self._session.updates}

    def decide(self, state: ClusterState, forecasts: Mapping[str, DemandForecast], now: datetime) -> Decision:
        t0 = time.perf_counter()
        self._solve_end = 0.0
        # work that needs nothing from the plan is done while HiGHS solves: the digest of the
        # inputs, the plan's steps (index and start; their capacity and jobs come later), and
        # the allocation's decisions for the jobs that run on where they run (the model's inputs)
        digest_job = Alongside(lambda: inputs_digest(state, forecasts, now, self._fingerprint))
        steps_job = Alongside(lambda: step_shells(now, self.config.step_s, self.config.horizon_steps))
        ahead_job: Alongside[AllocationAhead] | None = None

        def while_solving(model_inputs: PlanInputs) -> None:
            nonlocal ahead_job
            digest_job.start()
            steps_job.start()
            ahead_job = Alongside(lambda: allocation_ahead(model_inputs, self._parts.texts))
            ahead_job.start()

        inputs: PlanInputs | None = None
        corrected: Mapping[str, DemandForecast] = forecasts
        try:
            corrected, factors = self._calibrator.adjust(state, forecasts, now)
            inputs = build_inputs(
                state, corrected, now, self.config, band_factors=factors, blocks=self._blocks
            )
            rounded, solver, objective, inputs = self._optimise(inputs, t0, while_solving)
        except Exception as exc:
            reason = f"planner error: {exc!r}"
            solver = SolverInfo(
                solver="highs", status="error", time_ms=0.0, fallback=True, fallback_reason=reason
            )
            rounded, objective = None, {}
        digest = digest_job.result()
        plan_id = plan_id_for(state.cluster, self.name, digest)
        try:
            if rounded is None:
                rounded, solver, inputs = self._fallback(state, forecasts, now, inputs, solver, t0)
            assert inputs is not None
            ahead = ahead_job.result() if ahead_job is not None else None
            if ahead is not None and ahead.facts.inputs is not inputs:  # a fallback's own inputs
                ahead = None
            shells = steps_job.result()
            decision = self._publish(inputs, rounded, plan_id, digest, solver, objective, shells, ahead)
            if self.config.lend_headroom and not solver.fallback:
                # lending is an extra: on any failure the plan stands without it
                with contextlib.suppress(Exception):
                    decision = lend_headroom(decision, state, corrected)
            if self._solve_end:
                self._post_solve_s = time.perf_counter() - self._solve_end
            return decision
        except Exception as exc:
            cause = solver.fallback_reason or solver.status
            reason = f"{cause}; fallback failed ({exc!r}); kept the current state"
            return keep_current_state(
                state, now, self.config, plan_id=plan_id, policy=self.name, digest=digest, reason=reason
            )

    def _publish(
        self,
        inputs: PlanInputs,
        rounded: RoundedPlan,
        plan_id: str,
        digest: str,
        solver: SolverInfo,
        objective: dict[str, float],
        shells: list[PlanStep],
        ahead: AllocationAhead | None,
    ) -> Decision:
        plan = build_horizon_plan(
            inputs,
            rounded,
            plan_id=plan_id,
            policy=self.name,
            digest=digest,
            solver=solver,
            objective=objective,
            cache=self._parts,
            shells=shells,
        )
        allocation = build_allocation(
            inputs,
            rounded,
            plan_id=plan_id,
            policy=self.name,
            fallback_reason=solver.fallback_reason,
            cache=self._parts,
            ahead=ahead,
        )
        if not solver.fallback:
            self._last_plan = plan
        return Decision(plan=plan, allocation=allocation)

    def _solve_limit_s(self, t0: float) -> float:
        """What is left of the decision's budget for the solve: the budget less the time spent
        since ``t0`` and what the last decision needed after its solve (rounding, plan, reasons,
        or the fallback); never under MIN_SOLVE_SHARE of the budget."""
        budget = self.config.time_limit_s
        left = budget - (time.perf_counter() - t0) - self._post_solve_s
        return max(left, MIN_SOLVE_SHARE * budget)

    def _optimise(
        self, inputs: PlanInputs, t0: float, while_solving: Callable[[PlanInputs], None]
    ) -> tuple[RoundedPlan | None, SolverInfo, dict[str, float], PlanInputs]:
        """Solve and round; also returns the inputs the plan is indexed by (job slots).
        ``while_solving`` is called with those inputs right before HiGHS runs (see
        optimizer/alongside.py)."""
        config = self.config
        if config.backend == "pyomo":
            from optimizer.pyomo_model import solve_with_pyomo

            inputs = replace(inputs, held_nodes=self._holds)
            result = solve_with_pyomo(inputs, config, time_limit_s=self._solve_limit_s(t0))
            self._solve_end = time.perf_counter()
            if result.relaxed is None:
                return (
                    None,
                    _failed("pyomo-highs", result.status, result.solver_ms, result.detail),
                    {},
                    inputs,
                )
            rounded = round_relaxed(inputs, config, *result.relaxed)
            self._holds = rounded.holds
            info = SolverInfo(solver="pyomo-highs", status=result.status, time_ms=result.solver_ms)
            return rounded, info, {"objective": result.objective}, inputs
        inputs = into_slots(inputs, self._slots, held_nodes=self._holds)
        key = structure_key(inputs)
        reuse = (
            self._structure is not None
            and self._structure.key == key
            and self._session.holds(key)
            and slots_match(self._structure, inputs)
        )
        coefficients = None
        carry = None
        if not reuse:
            old, old_ids = self._structure, self._structure_ids
            self._structure = build_structure(inputs, key)
            self._objective_columns = objective_columns(self._structure)
            if old is not None:  # a new slot layout: start from the old basis, matched by job
                carry = carried_indices(old, old_ids, self._structure, inputs.job_ids)
            self._session.forget(keep_basis=carry is not None)
        else:
            assert self._structure is not None
            coefficients = update_gangs(self._structure, inputs)
        self._structure_ids = inputs.job_ids
        structure = self._structure
        assert structure is not None
        params = fill_parameters(structure, inputs, config)
        outcome: SolveOutcome = self._session.solve(
            structure, params, self._solve_limit_s(t0), coefficients, carry, lambda: while_solving(inputs)
        )
        self._solve_end = time.perf_counter()
        self.last_solver_ms = outcome.solver_ms
        if not outcome.ok or outcome.x is None:
            return None, _failed("highs", outcome.status, outcome.solver_ms, outcome.detail), {}, inputs
        rounded = extract_plan(structure, inputs, config, outcome.x)
        self._holds = rounded.holds
        info = SolverInfo(solver="highs", status=outcome.status, time_ms=outcome.solver_ms)
        return rounded, info, objective_terms(structure, params, outcome.x, self._objective_columns), inputs

    def _fallback(
        self,
        state: ClusterState,
        forecasts: Mapping[str, DemandForecast],
        now: datetime,
        inputs: PlanInputs | None,
        solver: SolverInfo,
        t0: float,
    ) -> tuple[RoundedPlan, SolverInfo, PlanInputs]:
        if inputs is None:
            inputs = build_inputs(state, {}, now, self.config, blocks=self._blocks)
        prefer = shifted_preferences(self._last_plan, inputs, now)
        kind = "the last feasible plan shifted by one step" if prefer is not None else "a greedy plan"
        rounded = greedy_plan(inputs, self.config, prefer)
        reason = f"{solver.fallback_reason or solver.status}; published {kind}"
        info = SolverInfo(
            solver=solver.solver,
            status=solver.status,
            time_ms=(time.perf_counter() - t0) * 1000.0,
            fallback=True,
            fallback_reason=reason,
        )
        return rounded, info, inputs


def _failed(solver: str, status: str, time_ms: float, detail: str) -> SolverInfo:
    return SolverInfo(
        solver=solver,
        status=status,
        time_ms=max(time_ms, 0.0),
        fallback=True,
        fallback_reason=detail or status,
    )


def solve(
    state: ClusterState,
    forecasts: Mapping[str, DemandForecast],
    config: PlannerConfig,
    now: datetime,
) -> Decision:
    """``plan = solve(state, forecasts, policy_config, now)``: one decision from a fresh planner."""
    return PlannerPolicy(config=config).decide(state, forecasts, now)

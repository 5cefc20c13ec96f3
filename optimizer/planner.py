"""PlannerPolicy: the receding-horizon planner behind the Policy interface (``ebbtide``, ``oracle``).

The loop calls ``decide`` once a step; it runs the pipeline on the calling thread:

1. calibrate the forecasts against the demand that followed (optimizer/calibration.py);
2. build the inputs, the decision as arrays (optimizer/inputs.py);
3. update the persistent model with them (optimizer/model_update.py);
4. solve it with HiGHS, warm-started (optimizer/solve_highs.py; or the Pyomo model,
   optimizer/pyomo_model.py, with ``backend='pyomo'``);
5. round step 0 and the later blocks to whole replicas and gangs (optimizer/extract.py);
6. assemble the HorizonPlan and the Allocation with reasons (optimizer/plan_build.py), and check
   it (optimizer/guard.py): a plan with a service under its min_replicas or a pool over-committed
   is replaced by the fallback;
7. lend step 0's idle inference headroom to preemptible jobs (optimizer/headroom.py), let
   services burst into the GPUs step 0 leaves idle (optimizer/idle_burst.py), and let every
   service burst over the batch that loses least if stopped, by up to its own GPUs or, after a
   surge within the last day, its largest rise (optimizer/surge_burst.py).

Only step 0 is committed. On time-out, infeasibility, any HiGHS status but Optimal (Empty and
Unbounded included) or any error the planner publishes a flagged
fallback (the last plan shifted by one step, else a greedy plan; optimizer/fallback.py) with the
reason; nothing escapes ``decide``. No I/O, and ``now`` is an argument: the only clock is the
decision's own time budget (``time_limit_s``), of which the solve gets what is left after the
model is built, less what the last decision needed after its solve. The policy object keeps the
model and the last plan between calls (warm start, fallback).

What the persistent model buys at 2,000 jobs / 10,000 GPUs (bench-decisions large case, 8
decisions per variant, measured with and without in the same minute on the 2-core development
host, p50 over decisions 3-8): updated in place and warm-started, a decision took 312 ms (HiGHS
190 ms); the same model passed fresh and solved cold every step took 796 ms (HiGHS 449 ms). A
rebuild (a new slot layout) that starts from the old basis carried over (optimizer/basis_carry.py)
solved in 143 ms against the cold 449 ms (decision 464 ms against 796 ms).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import NamedTuple

from loop import Decision, config_fingerprint, inputs_digest, plan_id_for
from optimizer.calibration import BandCalibrator
from optimizer.config import PlannerConfig
from optimizer.extract import relaxed_shares, round_relaxed
from optimizer.fallback import greedy_plan, keep_current_state, shifted_preferences
from optimizer.guard import violations
from optimizer.headroom import Kept, kept_by_service, lend_headroom, taken_back_gpus
from optimizer.idle_burst import burst_into_idle
from optimizer.inputs import PlanInputs, build_inputs, make_blocks
from optimizer.model_update import HorizonModel, objective_terms
from optimizer.nodes import NodeHolds
from optimizer.plan_build import assemble_decision, held_nodes_by_pool
from optimizer.rounding import RoundedPlan
from optimizer.surge_burst import burst_over_batch
from schemas import ClusterState, DemandForecast, HorizonPlan, SolverInfo

_log = logging.getLogger(__name__)

MIN_SOLVE_SHARE = 0.25
"""The solve always gets at least this share of the decision's budget."""
FIRST_POST_SOLVE_SHARE = 0.1
"""Before any decision was measured, the work after the solve is taken to need this share."""


class UnsafePlan(ValueError):
    """Even the fallback plan breaks a rule of optimizer/guard.py: the current state is kept."""


class Planned(NamedTuple):
    """What a decision's solve and rounding gave: the inputs the plan is indexed by (job slots),
    the rounded plan (None: the solve failed and the fallback plans), solver and objective."""

    inputs: PlanInputs | None
    rounded: RoundedPlan | None
    solver: SolverInfo
    objective: dict[str, float]


class PlannerPolicy:
    """The optimizer as a Policy. ``name`` only labels its output."""

    def __init__(self, name: str = "ebbtide", config: PlannerConfig | None = None) -> None:
        self.name = name
        self.config = config or PlannerConfig()
        self._fingerprint = config_fingerprint(self.config)
        self._blocks = make_blocks(self.config, self.config.horizon_steps, self.config.step_s)
        self._calibrator = BandCalibrator()
        self._model = HorizonModel()
        self._holds: NodeHolds = {}
        self._last_plan: HorizonPlan | None = None
        self._kept: dict[str, Kept] = {}  # what each service kept (not lent) at the last decision
        self._post_solve_s = FIRST_POST_SOLVE_SHARE * self.config.time_limit_s
        self._solve_end = 0.0
        self._horizon_s = self.config.horizon_steps * self.config.step_s
        self.last_solver_ms = 0.0

    def session_stats(self) -> dict[str, int]:
        """How often the solver model was rebuilt versus updated in place (warm start)."""
        session = self._model.session
        return {"rebuilds": session.rebuilds, "updates": session.updates}

    def decide(self, state: ClusterState, forecasts: Mapping[str, DemandForecast], now: datetime) -> Decision:
        t0 = time.perf_counter()
        self._solve_end = 0.0
        digest = inputs_digest(state, forecasts, now, self._fingerprint)
        plan_id = plan_id_for(state.cluster, self.name, digest)
        corrected: Mapping[str, DemandForecast] = forecasts
        inputs: PlanInputs | None = None
        try:
            corrected, factors = self._calibrator.adjust(state, forecasts, now)
            inputs = build_inputs(
                state,
                corrected,
                now,
                self.config,
                band_factors=factors,
                blocks=self._blocks,
                scaled_up_gpus=self._scaled_up(state),
            )
            planned = self._solve_and_round(inputs, t0)
        except Exception as exc:
            planned = Planned(inputs, None, _failed("highs", "error", 0.0, f"planner error: {exc!r}"), {})
        try:
            if planned.rounded is None:
                planned = self._fallback(state, now, planned, t0)
            decision = self._assemble(planned, plan_id, digest)
            broken = violations(state, decision.allocation, now, self._horizon_s)
            if broken and not planned.solver.fallback:
                solver = planned.solver
                reason = f"HiGHS status {solver.status}, but the plan breaks a rule: {'; '.join(broken)}"
                failed = Planned(
                    planned.inputs, None, _failed(solver.solver, solver.status, solver.time_ms, reason), {}
                )
                planned = self._fallback(state, now, failed, t0)
                decision = self._assemble(planned, plan_id, digest)
                broken = violations(state, decision.allocation, now, self._horizon_s)
            if broken:
                raise UnsafePlan("; ".join(broken))
            if not planned.solver.fallback:
                self._last_plan = decision.plan
                assert planned.inputs is not None and planned.rounded is not None  # (as _assemble's)
                held = held_nodes_by_pool(planned.inputs, planned.rounded.outcome)
                decision = self._lend(decision, state, corrected, held)
            if self._solve_end:
                self._post_solve_s = time.perf_counter() - self._solve_end
            return decision
        except Exception as exc:
            cause = planned.solver.fallback_reason or planned.solver.status
            reason = f"{cause}; fallback failed ({exc!r}); kept the current state"
            return keep_current_state(
                state, now, self.config, plan_id=plan_id, policy=self.name, digest=digest, reason=reason
            )

    def _scaled_up(self, state: ClusterState) -> dict[str, float]:
        """Services running more GPUs than the last decision gave them (their autoscaler took
        back lent or idle GPUs within the step): service -> GPUs it runs now."""
        out: dict[str, float] = {}
        for service in state.services:
            name = service.spec.service
            running = taken_back_gpus(service, self._kept.get(name))
            if running is not None:
                out[name] = running
        return out

    def _assemble(self, planned: Planned, plan_id: str, digest: str) -> Decision:
        assert planned.inputs is not None and planned.rounded is not None
        return assemble_decision(
            planned.inputs,
            planned.rounded,
            plan_id=plan_id,
            policy=self.name,
            digest=digest,
            solver=planned.solver,
            objective=planned.objective,
        )

    def _solve_and_round(self, inputs: PlanInputs, t0: float) -> Planned:
        """Update the model, solve it and round the solution (stages 3 to 5)."""
        if self.config.backend == "pyomo":
            return self._solve_and_round_pyomo(inputs, t0)
        update = self._model.update(inputs, self.config, self._holds)
        outcome = self._model.solve(update, self._solve_limit_s(t0))
        self._solve_end = time.perf_counter()
        self.last_solver_ms = outcome.solver_ms
        if not outcome.ok or outcome.x is None:
            return Planned(
                update.inputs, None, _failed("highs", outcome.status, outcome.solver_ms, outcome.detail), {}
            )
        relaxed = relaxed_shares(update.structure, update.inputs, outcome.x)
        rounded = round_relaxed(update.inputs, self.config, *relaxed)
        self._holds = rounded.holds
        info = SolverInfo(solver="highs", status=outcome.status, time_ms=outcome.solver_ms)
        return Planned(update.inputs, rounded, info, objective_terms(update, outcome.x))

    def _solve_and_round_pyomo(self, inputs: PlanInputs, t0: float) -> Planned:
        from optimizer.pyomo_model import solve_with_pyomo

        inputs = replace(inputs, held_nodes=self._holds)
        result = solve_with_pyomo(inputs, self.config, time_limit_s=self._solve_limit_s(t0))
        self._solve_end = time.perf_counter()
        if result.relaxed is None:
            return Planned(
                inputs, None, _failed("pyomo-highs", result.status, result.solver_ms, result.detail), {}
            )
        rounded = round_relaxed(inputs, self.config, *result.relaxed)
        self._holds = rounded.holds
        info = SolverInfo(solver="pyomo-highs", status=result.status, time_ms=result.solver_ms)
        return Planned(inputs, rounded, info, {"objective": result.objective})

    def _solve_limit_s(self, t0: float) -> float:
        """What is left of the decision's budget for the solve: the budget less the time spent
        since ``t0`` and what the last decision needed after its solve (rounding, plan, reasons,
        or the fallback); never under MIN_SOLVE_SHARE of the budget."""
        budget = self.config.time_limit_s
        left = budget - (time.perf_counter() - t0) - self._post_solve_s
        return max(left, MIN_SOLVE_SHARE * budget)

    def _lend(
        self,
        decision: Decision,
        state: ClusterState,
        forecasts: Mapping[str, DemandForecast],
        held_nodes: Mapping[str, Mapping[str, float]],
    ) -> Decision:
        """Lending and bursting (into idle GPUs, over batch in a surge) are extras: on any failure
        the plan stands without them, and the failure is logged with its traceback (it is a bug,
        not a plan)."""
        config = self.config
        margin_z = config.peak_margin_z if config.peak_margin else None
        stages: list[tuple[bool, str, Callable[[Decision], Decision]]] = [
            (
                config.lend_headroom,
                "lending headroom",
                lambda d: lend_headroom(d, state, forecasts, margin_z, self._kept, held_nodes),
            ),
            (config.burst_into_idle, "bursting into idle GPUs", lambda d: burst_into_idle(d, state)),
            (
                config.burst_over_batch,
                "bursting over batch",
                lambda d: burst_over_batch(d, state, config.peak_margin_z),
            ),
        ]
        for enabled, what, stage in stages:
            if not enabled:
                continue
            try:
                decision = stage(decision)
            except Exception:
                _log.exception("%s failed; the plan stands without it", what)
        self._kept = kept_by_service(decision.allocation.services)
        return decision

    def _fallback(self, state: ClusterState, now: datetime, failed: Planned, t0: float) -> Planned:
        """The last plan shifted by one step, else a greedy plan, flagged with the reason."""
        inputs = failed.inputs
        if inputs is None:
            inputs = build_inputs(state, {}, now, self.config, blocks=self._blocks)
        prefer = shifted_preferences(self._last_plan, inputs, now)
        kind = "the last feasible plan shifted by one step" if prefer is not None else "a greedy plan"
        rounded = greedy_plan(inputs, self.config, prefer)
        solver = failed.solver
        info = SolverInfo(
            solver=solver.solver,
            status=solver.status,
            time_ms=(time.perf_counter() - t0) * 1000.0,
            fallback=True,
            fallback_reason=f"{solver.fallback_reason or solver.status}; published {kind}",
        )
        return Planned(inputs, rounded, info, {})


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

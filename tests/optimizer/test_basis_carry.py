"""A model rebuilt for a new slot layout starts from the old basis (optimizer/basis_carry.py).

Same cluster, two slot layouts: the second model, given the first one's optimal basis through the
column and row match, must reach the same optimum without pivoting; a rebuild on a cluster that
moved on must still reach the cold solve's optimum.
"""

from __future__ import annotations

import numpy as np
import pytest
from optimizer_cases import NOW, three_pool_cluster

import optimizer.slots as slots
from optimizer.basis_carry import carried_indices
from optimizer.config import PlannerConfig
from optimizer.formulation import build_structure
from optimizer.inputs import PlanInputs, build_inputs
from optimizer.parameters import fill_parameters
from optimizer.solve_highs import HighsSession, SolveOutcome

CONFIG = PlannerConfig(
    horizon_steps=24, fine_steps=3, mid_block_steps=3, mid_until_step=12, coarse_block_steps=6
)


def _inputs(n_jobs: int, first: int = 0, shift_steps: int = 0) -> PlanInputs:
    cluster, forecasts = three_pool_cluster(n_jobs, first, weights=(1.0, 2.0, 4.0), peak_step=8 - shift_steps)
    return build_inputs(cluster, forecasts, NOW, CONFIG)


def _laid_out(inputs: PlanInputs, spare_min: int, monkeypatch: pytest.MonkeyPatch) -> PlanInputs:
    """The inputs in a fresh slot table with ``spare_min`` spare slots per class."""
    monkeypatch.setattr(slots, "SPARE_MIN", spare_min)
    monkeypatch.setattr(slots, "SPARE_SQRT_FACTOR", 0.0)
    return slots.into_slots(inputs, slots.SlotTable())


def _solve_cold(inputs: PlanInputs) -> SolveOutcome:
    structure = build_structure(inputs)
    return HighsSession().solve(structure, fill_parameters(structure, inputs, CONFIG), 10.0)


def test_same_cluster_new_layout_needs_no_pivot(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = _inputs(30)
    first = _laid_out(raw, 6, monkeypatch)
    second = _laid_out(raw, 2, monkeypatch)
    old, new = build_structure(first), build_structure(second)
    assert new.n_cols < old.n_cols  # a different layout: fewer empty slots
    session = HighsSession()
    before = session.solve(old, fill_parameters(old, first, CONFIG), 10.0)
    assert before.ok and before.iterations > 0
    carry = carried_indices(old, first.job_ids, new, second.job_ids)
    assert (carry[0] >= 0).any() and (carry[1] >= 0).any()
    session.forget(keep_basis=True)
    after = session.solve(new, fill_parameters(new, second, CONFIG), 10.0, None, carry)
    assert after.ok and not after.warm
    assert after.iterations == 0
    assert after.objective == pytest.approx(before.objective, rel=1e-9, abs=1e-6)


def test_carried_start_on_a_moved_cluster_reaches_the_cold_optimum(monkeypatch: pytest.MonkeyPatch) -> None:
    first = _laid_out(_inputs(30), 6, monkeypatch)
    moved_raw = _inputs(30, first=5, shift_steps=2)  # five jobs left, five arrived, demand moved
    moved = _laid_out(moved_raw, 2, monkeypatch)
    old, new = build_structure(first), build_structure(moved)
    session = HighsSession()
    assert session.solve(old, fill_parameters(old, first, CONFIG), 10.0).ok
    carry = carried_indices(old, first.job_ids, new, moved.job_ids)
    kept_jobs = set(first.job_ids) & set(moved.job_ids) - {""}
    assert len(kept_jobs) == 25
    session.forget(keep_basis=True)
    carried = session.solve(new, fill_parameters(new, moved, CONFIG), 10.0, None, carry)
    cold = _solve_cold(moved)
    assert carried.ok and cold.ok
    assert carried.objective == pytest.approx(cold.objective, rel=1e-7, abs=1e-6)
    assert carried.iterations < cold.iterations


def test_without_a_kept_basis_the_rebuild_is_a_cold_start(monkeypatch: pytest.MonkeyPatch) -> None:
    inputs = _laid_out(_inputs(12), 6, monkeypatch)
    structure = build_structure(inputs)
    session = HighsSession()
    session.forget()  # nothing kept: carry is ignored
    carry = (np.zeros(structure.n_cols, dtype=np.int64), np.zeros(structure.n_rows, dtype=np.int64))
    outcome = session.solve(structure, fill_parameters(structure, inputs, CONFIG), 10.0, None, carry)
    assert outcome.ok and outcome.objective == pytest.approx(_solve_cold(inputs).objective, rel=1e-9)


def test_small_model_pricing_reaches_the_same_optimum(monkeypatch: pytest.MonkeyPatch) -> None:
    """Models up to solve_highs.DEVEX_MAX_ROWS are solved with Devex pricing and no cost
    perturbation, larger ones with HiGHS's defaults: the same optimum either way, cold and after
    a warm update."""
    import optimizer.solve_highs as solve_highs

    first = _inputs(30)
    later = _inputs(30, shift_steps=2)
    structure = build_structure(first)
    assert structure.n_rows <= solve_highs.DEVEX_MAX_ROWS
    objectives = {}
    for rows in (solve_highs.DEVEX_MAX_ROWS, 0):
        monkeypatch.setattr(solve_highs, "DEVEX_MAX_ROWS", rows)
        session = HighsSession()
        cold = session.solve(structure, fill_parameters(structure, first, CONFIG), 10.0)
        warm = session.solve(structure, fill_parameters(structure, later, CONFIG), 10.0)
        assert cold.ok and warm.ok and warm.warm
        _, pricing = session._highs.getOptionValue("simplex_dual_edge_weight_strategy")  # type: ignore[union-attr]
        assert pricing == (solve_highs.DEVEX if rows else -1)
        objectives[rows] = (cold.objective, warm.objective)
    small, default = objectives.values()
    assert small == pytest.approx(default, rel=1e-9, abs=1e-6)

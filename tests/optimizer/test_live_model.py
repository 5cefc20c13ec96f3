"""HiGHS holds only the live part of a small model (optimizer/live_part.py, solve_highs.py).

Dropping columns fixed at zero and rows that cannot bind must not change the optimum: over a run
of seed-scale decisions, where jobs arrive, start, finish and the held part is deleted from and
added to in place, every optimum equals a cold solve of the whole model, and its solution is
feasible for the whole model.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import optimizer.solve_highs as solve_highs
from bench.decisions import CASES, SyntheticCluster
from optimizer.config import PlannerConfig
from optimizer.formulation import ColumnMatrix, ModelStructure
from optimizer.live_part import (
    HUGE,
    ActivityBounds,
    Entries,
    column_entries,
    live_parts,
    positions,
    row_entries,
)
from optimizer.parameters import Parameters
from optimizer.planner import PlannerPolicy

INF = np.inf


def _matrix(dense: np.ndarray) -> ColumnMatrix:
    rows, cols = np.nonzero(dense)
    return ColumnMatrix.from_triplets(dense.shape[0], dense.shape[1], rows, cols, dense[rows, cols])


def test_live_parts_keep_what_can_bind() -> None:
    dense = np.array(
        [
            [1.0, 1.0, 0.0],  # x0 + x1 >= 0 with x >= 0: always holds
            [1.0, 1.0, 0.0],  # x0 + x1 <= 1 with x0, x1 <= 1: can bind
            [0.0, -1.0, 1.0],  # x2 - x1 <= 5 with x1 >= 0, x2 <= 3: always holds
            [0.0, 0.0, 1.0],  # x2 >= 1: can bind
        ]
    )
    params = Parameters(
        cost=np.zeros(3),
        col_lower=np.zeros(3),
        col_upper=np.array([1.0, 1.0, 3.0]),
        row_lower=np.array([0.0, -INF, -INF, 1.0]),
        row_upper=np.array([INF, 1.0, 5.0, INF]),
    )
    activity = ActivityBounds(_matrix(dense))
    live_col, live_row = live_parts(activity, params)
    assert live_col.tolist() == [True, True, True]
    assert live_row.tolist() == [False, True, False, True]
    fixed = replace(params, col_upper=np.array([1.0, 0.0, 3.0]))
    assert live_parts(activity, fixed)[0].tolist() == [True, False, True]
    unbounded = replace(params, col_upper=np.array([1.0, 1.0, INF]))
    assert live_parts(activity, unbounded)[1].tolist() == [False, True, True, True]


def test_activity_bounds_follow_entries_changed_in_place() -> None:
    rng = np.random.default_rng(5)
    dense = np.where(rng.random((20, 25)) < 0.3, rng.normal(size=(20, 25)), 0.0)
    matrix = _matrix(dense)
    lower = np.where(rng.random(25) < 0.2, -INF, 0.0)
    upper = np.where(rng.random(25) < 0.3, INF, rng.random(25) * 4)
    activity = ActivityBounds(matrix)
    changed = rng.choice(matrix.data.size, 6, replace=False)
    matrix.data[changed] = -matrix.data[changed]  # signs flip: entries move between P and N
    activity.set(changed, matrix.data[changed])
    least, greatest = activity(lower, upper)
    fresh = ActivityBounds(matrix)(lower, upper)
    assert np.array_equal(least, fresh[0]) and np.array_equal(greatest, fresh[1])
    for row in range(20):
        exact = sum(v * (lower[c] if v > 0 else upper[c]) for c, v in _row(matrix, row))
        if np.isfinite(exact):
            assert least[row] == pytest.approx(exact, rel=1e-12, abs=1e-9)
        else:  # an infinite bound times a coefficient: far below any finite row bound
            assert least[row] < -HUGE / 1e3


def _summed_as_the_whole_product(matrix: ColumnMatrix, lower: np.ndarray, upper: np.ndarray):  # type: ignore[no-untyped-def]
    """(least, greatest) as row r of [[P, N], [N, P]] @ [lower; upper] sums them: every entry's
    positive part, then every entry's negative part (least), in row order, zeros included."""
    bounds = np.clip(np.concatenate([lower, upper]), -HUGE, HUGE).tolist()
    n = lower.size
    least, greatest = [], []
    for row in range(matrix.n_rows):
        entries = _row(matrix, row)
        low = high = 0.0
        for c, v in entries:
            low += max(v, 0.0) * bounds[c]
            high += min(v, 0.0) * bounds[c]
        for c, v in entries:
            low += min(v, 0.0) * bounds[n + c]
            high += max(v, 0.0) * bounds[n + c]
        least.append(low)
        greatest.append(high)
    return np.asarray(least), np.asarray(greatest)


def test_activity_bounds_sum_each_row_as_the_whole_sign_split_product_does() -> None:
    """The product holds each entry's two terms only (no zeros): the sums are bit for bit those
    of the whole [[P, N], [N, P]] product, also after entries change in place with or without a
    change of sign."""
    rng = np.random.default_rng(11)
    dense = np.where(rng.random((30, 40)) < 0.25, rng.normal(size=(30, 40)), 0.0)
    matrix = _matrix(dense)
    lower = np.where(rng.random(40) < 0.2, -INF, rng.random(40) - 0.5)
    upper = np.where(rng.random(40) < 0.3, INF, lower + rng.random(40) * 4)
    activity = ActivityBounds(matrix)
    for flip in (False, True, False):
        changed = rng.choice(matrix.data.size, 8, replace=False)
        scale = rng.random(8) + 0.5
        matrix.data[changed] *= -scale if flip else scale
        activity.set(changed, matrix.data[changed])
        least, greatest = activity(lower, upper)
        expected = _summed_as_the_whole_product(matrix, lower, upper)
        assert np.array_equal(least, expected[0]) and np.array_equal(greatest, expected[1])


def _row(matrix: ColumnMatrix, row: int) -> list[tuple[int, float]]:
    cols = matrix.entry_cols[matrix.indices == row]
    return list(zip(cols.tolist(), matrix.data[matrix.indices == row].tolist(), strict=True))


def _dense(entries: Entries, n_major: int, n_minor: int) -> np.ndarray:
    out = np.zeros((n_major, n_minor))
    for k in range(n_major):
        lo, hi = entries.start[k], entries.start[k + 1]
        out[k, entries.index[lo:hi]] = entries.value[lo:hi]
    return out


def test_entries_are_the_held_submatrix() -> None:
    rng = np.random.default_rng(3)
    dense = np.where(rng.random((30, 40)) < 0.2, rng.normal(size=(30, 40)), 0.0)
    matrix = _matrix(dense)
    rows = np.sort(rng.choice(30, 12, replace=False))
    cols = np.sort(rng.choice(40, 15, replace=False))
    by_col = column_entries(matrix, cols, positions(rows, 30))
    assert np.array_equal(_dense(by_col, cols.size, rows.size), dense[np.ix_(rows, cols)].T)
    by_row = row_entries(matrix, rows, positions(cols, 40))
    assert np.array_equal(_dense(by_row, rows.size, cols.size), dense[np.ix_(rows, cols)])


def _whole_model_optimum(structure: ModelStructure, params: Parameters) -> float:
    matrix = structure.matrix
    whole = Entries(matrix.indptr.astype(np.int32), matrix.indices.astype(np.int32), matrix.data.copy())
    highs = solve_highs.quiet_highs()
    highs.setOptionValue("threads", 1)  # as the session's: HiGHS's thread pool is set up once
    every_col, every_row = np.arange(structure.n_cols), np.arange(structure.n_rows)
    highs.passModel(solve_highs._to_highs_lp(params, every_col, every_row, whole))
    highs.run()
    assert highs.getModelStatus() == solve_highs.highspy.HighsModelStatus.kOptimal
    return float(highs.getInfo().objective_function_value)


def test_live_model_reaches_the_whole_models_optimum(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[float, float, int, int]] = []
    solve = solve_highs.HighsSession.solve

    def checked(self: solve_highs.HighsSession, structure: ModelStructure, params: Parameters, *args: object):  # type: ignore[no-untyped-def]
        reference = _whole_model_optimum(structure, params)
        outcome = solve(self, structure, params, *args)  # type: ignore[arg-type]
        assert outcome.ok and outcome.x is not None
        x = outcome.x
        assert np.all(x >= params.col_lower - 1e-7) and np.all(x <= params.col_upper + 1e-7)
        activity = np.bincount(
            structure.matrix.indices,
            structure.matrix.data * x[structure.matrix.entry_cols],
            minlength=structure.n_rows,
        )
        assert np.all(activity >= params.row_lower - 1e-6) and np.all(activity <= params.row_upper + 1e-6)
        seen.append((outcome.objective, reference, *self.held))
        return outcome

    monkeypatch.setattr(solve_highs.HighsSession, "solve", checked)
    cluster = SyntheticCluster(CASES["seed"])
    policy = PlannerPolicy(config=PlannerConfig())
    for _ in range(40):
        state = cluster.state()
        decision = policy.decide(state, cluster.forecasts(state), cluster.now)
        cluster.advance(decision.allocation)
    assert len(seen) == 40
    structure = policy._model._structure
    assert structure is not None and structure.n_rows <= solve_highs.SMALL_MODEL_ROWS
    for objective, reference, _, _ in seen:
        assert objective == pytest.approx(reference, rel=1e-7, abs=1e-6)
    held_cols = {cols for _, _, cols, _ in seen}
    held_rows = {rows for _, _, _, rows in seen}
    assert max(held_cols) < structure.n_cols and max(held_rows) < structure.n_rows  # a part, not all
    assert len(held_cols) > 5 and len(held_rows) > 5  # and it changed as the cluster moved

"""Solve: the horizon LP in HiGHS (highspy), kept between decisions and updated in place.

Pipeline stage 4 of a decision (after optimizer/model_update.py, before optimizer/extract.py).
A HighsSession keeps one HiGHS model. While the model's structure (its matrix) is unchanged,
only the costs and bounds that moved (and the matrix entries of job slots taken over by a job with
another gang) are changed, and HiGHS starts from its last basis (a warm start). A new structure is
passed whole, starting from the old basis carried over by matching columns and rows
(optimizer/basis_carry.py) when the planner gives that match. Never raises on a solver problem:
the outcome says what happened and the planner falls back.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import highspy
import numpy as np

from optimizer.basis_carry import BASIC, LOWER, carried_status
from optimizer.formulation import EntryChanges, ModelStructure
from optimizer.parameters import Parameters

_STATUS = list(highspy.HighsBasisStatus.__members__.values())
"""HiGHS's basis statuses by value (kLower=0, kBasic=1, kUpper=2, kZero=3, kNonbasic=4)."""

SMALL_MODEL_ROWS = 4_000
"""A model with up to this many rows is small: HiGHS prices it with Devex, without cost
perturbation. At seed scale (~45 iterations per warm solve) the default steepest-edge pricing's
exact initial weights cost as much as the iterations they save (100 seed decisions: 47.2M -> 43.4M
instructions per decision with Devex); at 500 jobs (~15,000 rows) Devex was 1.7x slower, at
2,000 jobs 3x, so larger models keep HiGHS's defaults."""
DEVEX = 1


@dataclass(frozen=True)
class SolveOutcome:
    ok: bool
    status: str
    x: np.ndarray | None
    objective: float
    solver_ms: float
    warm: bool
    detail: str = ""
    iterations: int = 0
    """Simplex iterations of this run (how far the start was from the optimum)."""


def quiet_highs() -> highspy.Highs:
    """A HiGHS instance that never prints. ``highspy.Highs()`` calls into HiGHS (to enable its
    callbacks) before an option can be set, and that first call prints the version banner on
    stdout; the core class under it takes ``output_flag`` first. The planner uses no callbacks."""
    highs = highspy._Highs()  # type: ignore[attr-defined]
    highs.setOptionValue("output_flag", False)
    return highs  # type: ignore[no-any-return]


def _to_highs_lp(structure: ModelStructure, params: Parameters) -> highspy.HighsLp:
    """The whole model as HiGHS's LP (column-wise matrix)."""
    matrix = structure.matrix
    model = highspy.HighsLp()
    model.num_col_ = structure.n_cols
    model.num_row_ = structure.n_rows
    model.col_cost_ = params.cost
    model.col_lower_ = params.col_lower
    model.col_upper_ = params.col_upper
    model.row_lower_ = params.row_lower
    model.row_upper_ = params.row_upper
    model.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    model.a_matrix_.start_ = matrix.indptr
    model.a_matrix_.index_ = matrix.indices
    model.a_matrix_.value_ = matrix.data
    model.a_matrix_.num_col_ = structure.n_cols
    model.a_matrix_.num_row_ = structure.n_rows
    return model


def _moved(*pairs: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Indices (int32, as HiGHS takes them) where any (new, old) pair differs."""
    changed = np.zeros(pairs[0][0].size, dtype=bool)
    for new, old in pairs:
        changed |= new != old
    return changed.nonzero()[0].astype(np.int32)


def _apply_changes(
    highs: highspy.Highs, params: Parameters, old: Parameters, coefficients: EntryChanges | None
) -> None:
    """Bring the model from ``old`` to ``params``: only what moved is handed to HiGHS."""
    idx = _moved((params.cost, old.cost))
    if idx.size:
        highs.changeColsCost(idx.size, idx, params.cost[idx])
    idx = _moved((params.col_lower, old.col_lower), (params.col_upper, old.col_upper))
    if idx.size:
        highs.changeColsBounds(idx.size, idx, params.col_lower[idx], params.col_upper[idx])
    idx = _moved((params.row_lower, old.row_lower), (params.row_upper, old.row_upper))
    if idx.size:
        highs.changeRowsBounds(  # type: ignore[attr-defined]
            idx.size, idx, params.row_lower[idx], params.row_upper[idx]
        )
    if coefficients is not None:
        changed = (coefficients.rows, coefficients.cols, coefficients.values)
        for row, col, value in zip(*(c.tolist() for c in changed), strict=True):
            highs.changeCoeff(row, col, value)


def _restart_from_basis(highs: highspy.Highs) -> None:
    """Start the next solve from the current basis with fresh simplex data. Without a matrix
    change HiGHS resumes with what it kept from the last solve (edge weights, perturbed costs);
    after this model's per-step cost and bound changes that resumption took more pivots than a
    fresh start from the same basis (p90 160 -> 62 iterations, the same optima). Small models
    (Devex, no perturbation) have nothing worth resetting."""
    basis = highs.getBasis()
    if basis.valid:
        highs.clearSolver()
        highs.setBasis(basis)


class HighsSession:
    """One persistent HiGHS model of a structure, updated in place while the structure holds.

    Persistent model and warm start: at 2,000 jobs a warm in-place update solved in 190 ms
    against 449 ms for the same model passed fresh and solved cold, and a rebuild starting from
    the carried basis in 143 ms (p50; the measurement is described in optimizer/planner.py).
    """

    def __init__(self) -> None:
        self._highs: highspy.Highs | None = None
        self._key: str | None = None
        self._params: Parameters | None = None
        self._small = True
        self._kept_basis: tuple[np.ndarray, np.ndarray] | None = None
        self.rebuilds = 0
        self.updates = 0

    def holds(self, key: str) -> bool:
        """Whether the live model has this structure (so coefficient changes can be applied)."""
        return self._highs is not None and self._key == key and self._params is not None

    def forget(self, keep_basis: bool = False) -> None:
        """Drop the model (its structure is gone); the next load passes a fresh one. With
        ``keep_basis`` the last optimal basis is kept for that load to start from."""
        self._kept_basis = self._optimal_basis() if keep_basis else None
        self._highs, self._key, self._params = None, None, None

    def _optimal_basis(self) -> tuple[np.ndarray, np.ndarray] | None:
        highs = self._highs
        if highs is None or highs.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            return None
        basis = highs.getBasis()
        if not basis.valid:
            return None
        cols = np.asarray([s.value for s in basis.col_status], dtype=np.int8)
        rows = np.asarray([s.value for s in basis.row_status], dtype=np.int8)
        return cols, rows

    def _pass_fresh(self, structure: ModelStructure, params: Parameters) -> highspy.Highs:
        self._small = structure.n_rows <= SMALL_MODEL_ROWS
        highs = quiet_highs()
        highs.setOptionValue("threads", 1)
        if self._small:
            highs.setOptionValue("simplex_dual_edge_weight_strategy", DEVEX)
            highs.setOptionValue("dual_simplex_cost_perturbation_multiplier", 0.0)
        highs.passModel(_to_highs_lp(structure, params))
        return highs

    def _start_from_kept_basis(
        self, highs: highspy.Highs, params: Parameters, carry: tuple[np.ndarray, np.ndarray]
    ) -> None:
        """Give the fresh model the kept basis through ``carry`` (the old index of each new column
        and row, -1: none); HiGHS repairs it where the count of basic variables is off."""
        kept, self._kept_basis = self._kept_basis, None
        if kept is None:
            return
        col_src, row_src = carry
        basis = highspy.HighsBasis()
        cols = carried_status(kept[0], col_src, LOWER, params.col_lower, params.col_upper)
        rows = carried_status(kept[1], row_src, BASIC, params.row_lower, params.row_upper)
        basis.col_status = [_STATUS[v] for v in cols.tolist()]
        basis.row_status = [_STATUS[v] for v in rows.tolist()]
        basis.valid = True
        basis.alien = True
        highs.setBasis(basis)

    def load(
        self,
        structure: ModelStructure,
        params: Parameters,
        coefficients: EntryChanges | None = None,
        carry: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> bool:
        """Make the session's model (structure, params); True when updated in place
        (``coefficients``: matrix entries changed in place, already written into the structure's
        matrix). A fresh model starts from the basis kept by ``forget(keep_basis=True)`` through
        ``carry`` when both are there."""
        old = self._params
        if self._highs is not None and self._key == structure.key and old is not None:
            _apply_changes(self._highs, params, old, coefficients)
            if not self._small:
                _restart_from_basis(self._highs)
            self._params = params
            self.updates += 1
            return True
        highs = self._pass_fresh(structure, params)
        if carry is not None:
            self._start_from_kept_basis(highs, params, carry)
        self._kept_basis = None
        self._highs, self._key, self._params = highs, structure.key, params
        self.rebuilds += 1
        return False

    def solve(
        self,
        structure: ModelStructure,
        params: Parameters,
        time_limit_s: float,
        coefficients: EntryChanges | None = None,
        carry: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> SolveOutcome:
        """Load (see ``load``) and solve within ``time_limit_s``."""
        try:
            warm = self.load(structure, params, coefficients, carry)
            assert self._highs is not None
            return self._run(self._highs, structure, params, time_limit_s, warm)
        except Exception as exc:
            self._highs, self._key, self._params = None, None, None
            return SolveOutcome(False, "error", None, float("nan"), 0.0, False, f"HiGHS error: {exc!r}")

    def _run(
        self,
        highs: highspy.Highs,
        structure: ModelStructure,
        params: Parameters,
        time_limit_s: float,
        warm: bool,
    ) -> SolveOutcome:
        # HiGHS's clock runs across calls on one instance: the limit is relative to it
        highs.setOptionValue("time_limit", float(highs.getRunTime()) + float(time_limit_s))
        t0 = time.perf_counter()
        highs.run()
        solver_ms = (time.perf_counter() - t0) * 1000.0
        status = highs.getModelStatus()
        name = highs.modelStatusToString(status)
        if status == highspy.HighsModelStatus.kModelEmpty:
            x = np.clip(np.zeros(structure.n_cols), params.col_lower, params.col_upper)
            return SolveOutcome(True, name, x, float(params.cost @ x), solver_ms, warm)
        if status != highspy.HighsModelStatus.kOptimal:
            limits = (highspy.HighsModelStatus.kTimeLimit, highspy.HighsModelStatus.kIterationLimit)
            if status not in limits:
                # infeasible or broken: start the next decision from a fresh model
                self._highs, self._key, self._params = None, None, None
            # on a time limit the model and its basis stay: the next decision continues from there
            return SolveOutcome(False, name, None, float("nan"), solver_ms, warm, f"HiGHS: {name}")
        x = np.asarray(highs.getSolution().col_value, dtype=float)
        _, iterations = highs.getInfoValue("simplex_iteration_count")
        return SolveOutcome(
            True, name, x, float(highs.getObjectiveValue()), solver_ms, warm, iterations=int(iterations)
        )

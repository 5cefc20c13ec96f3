"""Solve: the horizon LP in HiGHS (highspy), kept between decisions and updated in place.

Pipeline stage 4 of a decision (after optimizer/model_update.py, before optimizer/extract.py).
A HighsSession keeps one HiGHS model. While the model's structure (its matrix) is unchanged,
only the costs and bounds that moved (and the matrix entries of job slots taken over by a job with
another gang) are changed, and HiGHS starts from its last basis (a warm start). A small model's
HiGHS copy is only its live part (optimizer/live_part.py): columns and rows that die or come alive
are deleted or added in place, keeping the basis valid. A new structure is
passed whole, starting from the old basis carried over by matching columns and rows
(optimizer/basis_carry.py) when the planner gives that match. Never raises on a solver problem:
the outcome says what happened and the planner falls back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import highspy
import numpy as np

from optimizer.basis_carry import BASIC, LOWER, carried_status
from optimizer.formulation import ModelStructure
from optimizer.live_part import ActivityBounds, Entries, column_entries, live_parts, positions, row_entries
from optimizer.parameters import Parameters
from optimizer.slot_updates import EntryChanges

_STATUS = list(highspy.HighsBasisStatus.__members__.values())
"""HiGHS's basis statuses by value (kLower=0, kBasic=1, kUpper=2, kZero=3, kNonbasic=4)."""

SMALL_MODEL_ROWS = 4_000
"""A model with up to this many rows is small: HiGHS holds only its live part
(optimizer/live_part.py)."""
DEVEX_MAX_ROWS = 2_000
"""A model with up to this many rows is priced with Devex, without cost perturbation, and
resumes from its last solve's simplex data. At seed scale (~1,340 rows, ~45 iterations per warm
solve) the default steepest-edge pricing's exact initial weights cost as much as the iterations
they save (100 seed decisions: 47.2M -> 43.4M instructions per decision with Devex). Larger
models keep HiGHS's defaults and restart from the basis each solve (``_restart_from_basis``):
at 200 jobs / 1,000 GPUs (bench-decisions ``mid``, ~3,200 rows) Devex took more iterations per
solve (p50 342, max 2,016 over 100 decisions) than the defaults (300, 1,247), at 500 jobs
(~15,000 rows) Devex was 1.7x slower, at 2,000 jobs 3x."""
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


def _to_highs_lp(params: Parameters, cols: np.ndarray, rows: np.ndarray, entries: Entries) -> highspy.HighsLp:
    """The part ``cols``, ``rows`` of the model as HiGHS's LP (column-wise matrix)."""
    model = highspy.HighsLp()
    model.num_col_ = cols.size
    model.num_row_ = rows.size
    model.col_cost_ = params.cost[cols]
    model.col_lower_ = params.col_lower[cols]
    model.col_upper_ = params.col_upper[cols]
    model.row_lower_ = params.row_lower[rows]
    model.row_upper_ = params.row_upper[rows]
    model.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    model.a_matrix_.start_ = entries.start
    model.a_matrix_.index_ = entries.index
    model.a_matrix_.value_ = entries.value
    model.a_matrix_.num_col_ = cols.size
    model.a_matrix_.num_row_ = rows.size
    return model


def _moved(*pairs: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Indices (int32, as HiGHS takes them) where any (new, old) pair differs."""
    changed = np.zeros(pairs[0][0].size, dtype=bool)
    for new, old in pairs:
        changed |= new != old
    return changed.nonzero()[0].astype(np.int32)


def _held(at: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(HiGHS positions, structure indices) of the indices ``idx`` the model holds (``at``: the
    HiGHS position of each structure index, -1 for those not held)."""
    pos = at[idx]
    keep = pos >= 0
    return pos[keep], idx[keep]


def _append(
    add: Callable[..., object],
    new: np.ndarray,
    data: tuple[np.ndarray, ...],
    entries: Entries,
    held: np.ndarray,
    held_at: np.ndarray,
) -> np.ndarray:
    """Add ``new`` rows or columns (HiGHS's addRows / addCols with their ``data`` and entries)
    after the ``held`` ones; ``held_at`` gets their positions. Returns what is held now."""
    add(new.size, *data, entries.index.size, entries.start[:-1], entries.index, entries.value)
    held_at[new] = np.arange(held.size, held.size + new.size, dtype=np.int32)
    return np.concatenate([held, new])


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


DEAD_SHARE = 0.05
"""Held columns and rows no longer live are deleted once they are this share of the model (more
than the ones the last deletion had to keep): fewer deletions, each a basis lookup."""


class HighsSession:
    """One persistent HiGHS model of a structure, updated in place while the structure holds: all
    of it, or its live part (optimizer/live_part.py) when it is small.

    Persistent model and warm start: at 2,000 jobs a warm in-place update solved in 190 ms
    against 449 ms for the same model passed fresh and solved cold, and a rebuild starting from
    the carried basis in 143 ms (p50; the measurement is described in optimizer/planner.py).
    """

    def __init__(self) -> None:
        self._highs: highspy.Highs | None = None
        self._key: str | None = None
        self._params: Parameters | None = None
        self._cols = np.zeros(0, dtype=np.int64)  # the structure's column of each HiGHS column
        self._rows = np.zeros(0, dtype=np.int64)
        self._col_at = np.zeros(0, dtype=np.int32)  # HiGHS position of each structure column, or -1
        self._row_at = np.zeros(0, dtype=np.int32)
        self._stuck = 0  # dead columns and rows the last deletion had to keep (basic, or binding slack)
        self._activity: ActivityBounds | None = None  # a small model's row activity bounds
        self._devex = False  # the model is priced with Devex (DEVEX_MAX_ROWS)
        self._kept_basis: tuple[np.ndarray, np.ndarray] | None = None
        self.rebuilds = 0
        self.updates = 0

    @property
    def held(self) -> tuple[int, int]:
        """(columns, rows) the HiGHS model holds now."""
        return self._cols.size, self._rows.size

    def holds(self, key: str) -> bool:
        """Whether the live model has this structure (so coefficient changes can be applied)."""
        return self._highs is not None and self._key == key and self._params is not None

    def forget(self, keep_basis: bool = False) -> None:
        """Drop the model (its structure is gone); the next load passes a fresh one. With
        ``keep_basis`` the last optimal basis is kept for that load to start from."""
        self._kept_basis = self._optimal_basis() if keep_basis else None
        self._highs, self._key, self._params = None, None, None

    def _optimal_basis(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The last optimal basis over the whole structure: a column not held is nonbasic at
        zero, a row not held has its slack basic."""
        highs, params = self._highs, self._params
        if highs is None or params is None or highs.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            return None
        basis = highs.getBasis()
        if not basis.valid:
            return None
        cols = np.full(params.cost.size, LOWER, dtype=np.int8)
        rows = np.full(params.row_lower.size, BASIC, dtype=np.int8)
        cols[self._cols] = np.fromiter(map(int, basis.col_status), dtype=np.int8, count=self._cols.size)
        rows[self._rows] = np.fromiter(map(int, basis.row_status), dtype=np.int8, count=self._rows.size)
        return cols, rows

    def _hold(self, cols: np.ndarray, rows: np.ndarray, n_cols: int, n_rows: int) -> None:
        self._cols, self._rows = cols, rows
        self._col_at, self._row_at = positions(cols, n_cols), positions(rows, n_rows)

    def _live_parts(self, structure: ModelStructure, params: Parameters) -> tuple[np.ndarray, np.ndarray]:
        """What HiGHS holds: the live part of a small model, all of a larger one."""
        if self._activity is not None:
            return live_parts(self._activity, params)
        return np.ones(structure.n_cols, dtype=bool), np.ones(structure.n_rows, dtype=bool)

    def _pass_fresh(self, structure: ModelStructure, params: Parameters) -> highspy.Highs:
        self._activity = ActivityBounds(structure.matrix) if structure.n_rows <= SMALL_MODEL_ROWS else None
        self._devex = structure.n_rows <= DEVEX_MAX_ROWS
        live_col, live_row = self._live_parts(structure, params)
        self._hold(np.flatnonzero(live_col), np.flatnonzero(live_row), structure.n_cols, structure.n_rows)
        self._stuck = 0
        highs = quiet_highs()
        highs.setOptionValue("threads", 1)
        if self._devex:
            highs.setOptionValue("simplex_dual_edge_weight_strategy", DEVEX)
            highs.setOptionValue("dual_simplex_cost_perturbation_multiplier", 0.0)
        entries = column_entries(structure.matrix, self._cols, self._row_at)
        if (
            highs.passModel(_to_highs_lp(params, self._cols, self._rows, entries))
            == highspy.HighsStatus.kError
        ):
            # e.g. a row bound of 1e20 or more (HiGHS's infinity) below a row: HiGHS keeps an empty model
            raise ValueError("HiGHS rejected the model (a bound it reads as infinite?)")
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
        basis.col_status = [_STATUS[v] for v in cols[self._cols].tolist()]
        basis.row_status = [_STATUS[v] for v in rows[self._rows].tolist()]
        basis.valid = True
        basis.alien = True
        highs.setBasis(basis)

    def _drop_dead(self, highs: highspy.Highs, keep_col: np.ndarray, keep_row: np.ndarray) -> bool:
        """Delete held columns and rows that are no longer live, once there are enough of them to
        pay for the basis lookup (a dead column or row held is harmless: fixed at zero, or unable
        to bind). Only what leaves the basis valid goes: a nonbasic column, a row whose slack is
        basic; the rest waits for a later basis. True when something was deleted."""
        held = keep_col.size + keep_row.size
        dead = held - int(np.count_nonzero(keep_col)) - int(np.count_nonzero(keep_row))
        if dead - self._stuck <= DEAD_SHARE * held:
            return False
        status, basic = highs.getBasicVariables()  # type: ignore[attr-defined]
        if status != highspy.HighsStatus.kOk:
            return False
        keep_col[basic[basic >= 0]] = True
        slack_basic = np.zeros(keep_row.size, dtype=bool)
        slack_basic[-1 - basic[basic < 0]] = True
        keep_row |= ~slack_basic
        dead_cols = (~keep_col).nonzero()[0].astype(np.int32)
        dead_rows = (~keep_row).nonzero()[0].astype(np.int32)
        self._stuck = dead - dead_cols.size - dead_rows.size
        if dead_cols.size:
            highs.deleteCols(dead_cols.size, dead_cols)
        if dead_rows.size:
            highs.deleteRows(dead_rows.size, dead_rows)
        return bool(dead_cols.size or dead_rows.size)

    def _apply_changes(
        self, highs: highspy.Highs, params: Parameters, old: Parameters, coefficients: EntryChanges | None
    ) -> None:
        """Bring the held columns and rows from ``old`` to ``params``: only what moved goes to HiGHS."""
        col_at, row_at = self._col_at, self._row_at
        pos, idx = _held(col_at, _moved((params.cost, old.cost)))
        if idx.size:
            highs.changeColsCost(idx.size, pos, params.cost[idx])
        pos, idx = _held(col_at, _moved((params.col_lower, old.col_lower), (params.col_upper, old.col_upper)))
        if idx.size:
            highs.changeColsBounds(idx.size, pos, params.col_lower[idx], params.col_upper[idx])
        pos, idx = _held(row_at, _moved((params.row_lower, old.row_lower), (params.row_upper, old.row_upper)))
        if idx.size:
            highs.changeRowsBounds(  # type: ignore[attr-defined]
                idx.size, pos, params.row_lower[idx], params.row_upper[idx]
            )
        if coefficients is not None:
            changed = (coefficients.rows, coefficients.cols, coefficients.values)
            for row, col, value in zip(*(c.tolist() for c in changed), strict=True):
                if row_at[row] >= 0 and col_at[col] >= 0:
                    highs.changeCoeff(int(row_at[row]), int(col_at[col]), value)

    def _update(
        self,
        highs: highspy.Highs,
        structure: ModelStructure,
        params: Parameters,
        old: Parameters,
        coefficients: EntryChanges | None,
    ) -> None:
        """Bring the held model to ``params``: drop what died, update what stays, add what is new."""
        if coefficients is not None and coefficients.at.size and self._activity is not None:
            self._activity.set(coefficients.at, coefficients.values)
        live_col, live_row = self._live_parts(structure, params)
        keep_col, keep_row = live_col[self._cols], live_row[self._rows]
        if self._drop_dead(highs, keep_col, keep_row):
            self._hold(self._cols[keep_col], self._rows[keep_row], structure.n_cols, structure.n_rows)
        self._apply_changes(highs, params, old, coefficients)
        col_at, row_at = self._col_at, self._row_at
        new_rows = (live_row & (row_at < 0)).nonzero()[0]
        new_cols = (live_col & (col_at < 0)).nonzero()[0]
        if new_rows.size:
            bounds = (params.row_lower[new_rows], params.row_upper[new_rows])
            entries = row_entries(structure.matrix, new_rows, col_at)
            self._rows = _append(highs.addRows, new_rows, bounds, entries, self._rows, row_at)
        if new_cols.size:
            data = (params.cost[new_cols], params.col_lower[new_cols], params.col_upper[new_cols])
            entries = column_entries(structure.matrix, new_cols, row_at)
            self._cols = _append(highs.addCols, new_cols, data, entries, self._cols, col_at)

    def load(
        self,
        structure: ModelStructure,
        params: Parameters,
        coefficients: EntryChanges | None = None,
        carry: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> bool:
        """Make the session's model (the held part of structure, params); True when updated in
        place (``coefficients``: matrix entries changed in place, already written into the
        structure's matrix). A fresh model starts from the basis kept by
        ``forget(keep_basis=True)`` through ``carry`` when both are there."""
        old = self._params
        if self._highs is not None and self._key == structure.key and old is not None:
            self._update(self._highs, structure, params, old, coefficients)
            if not self._devex:  # a Devex model (no cost perturbation) has nothing worth resetting
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

    def _nothing_to_decide(self, structure: ModelStructure, params: Parameters, warm: bool) -> SolveOutcome:
        """Every column is fixed at zero by its bounds: zero is the optimum where every held row
        admits it (HiGHS would answer Empty, which counts as a failure otherwise)."""
        rows = self._rows
        if np.all(params.row_lower[rows] <= 1e-9) and np.all(params.row_upper[rows] >= -1e-9):
            x = np.zeros(structure.n_cols)
            return SolveOutcome(True, "Optimal", x, float(params.cost @ x), 0.0, warm, "no free column")
        return SolveOutcome(
            False, "Infeasible", None, float("nan"), 0.0, warm, "HiGHS: Infeasible (no free column)"
        )

    def _run(
        self,
        highs: highspy.Highs,
        structure: ModelStructure,
        params: Parameters,
        time_limit_s: float,
        warm: bool,
    ) -> SolveOutcome:
        # HiGHS's clock runs across calls on one instance: the limit is relative to it
        if self._cols.size == 0:
            return self._nothing_to_decide(structure, params, warm)
        highs.setOptionValue("time_limit", float(highs.getRunTime()) + float(time_limit_s))
        t0 = time.perf_counter()
        highs.run()
        solver_ms = (time.perf_counter() - t0) * 1000.0
        status = highs.getModelStatus()
        name = highs.modelStatusToString(status)
        if status != highspy.HighsModelStatus.kOptimal:
            # Anything but Optimal is a failure the planner falls back from (Empty included: an
            # input HiGHS reads as infinite, e.g. a demand of 1e20, can leave it nothing to solve).
            limits = (highspy.HighsModelStatus.kTimeLimit, highspy.HighsModelStatus.kIterationLimit)
            if status not in limits:
                # infeasible or broken: start the next decision from a fresh model
                self._highs, self._key, self._params = None, None, None
            # on a time limit the model and its basis stay: the next decision continues from there
            return SolveOutcome(False, name, None, float("nan"), solver_ms, warm, f"HiGHS: {name}")
        values = highs.getSolution().col_value
        x = np.zeros(structure.n_cols)  # columns not held are fixed at zero
        x[self._cols] = np.fromiter(values, dtype=float, count=len(values))
        _, iterations = highs.getInfoValue("simplex_iteration_count")
        return SolveOutcome(
            True, name, x, float(highs.getObjectiveValue()), solver_ms, warm, iterations=int(iterations)
        )

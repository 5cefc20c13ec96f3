"""Solving the horizon LP with HiGHS directly (highspy): the planner's hot path.

A HighsSession keeps one Highs instance between decisions. When the model's structure (its
matrix) is unchanged, only costs and bounds are updated (and, on a small model, columns and rows
that died or came alive are deleted or added: HiGHS holds only the live part, see
optimizer/lp_reduction.py) and HiGHS starts from its last basis (a warm start); otherwise the
model is passed again, starting from the old basis carried over by matching columns and rows
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
from optimizer.formulation import EntryChanges, ModelStructure
from optimizer.lp_reduction import ActivityBounds, Entries, column_entries, live_parts, positions, row_entries
from optimizer.parameters import Parameters

_STATUS = list(highspy.HighsBasisStatus.__members__.values())
"""HiGHS's basis statuses by value (kLower=0, kBasic=1, kUpper=2, kZero=3, kNonbasic=4)."""


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


def _to_highs_lp(params: Parameters, cols: np.ndarray, rows: np.ndarray, entries: Entries) -> highspy.HighsLp:
    """The live part of the model (``cols``, ``rows`` of the structure) as HiGHS's LP."""
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


def _changed(new: np.ndarray, old: np.ndarray) -> np.ndarray:
    """Indices where the value moved (sorted)."""
    changed: np.ndarray = (new != old).nonzero()[0]
    return changed


def _held(at: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(HiGHS positions, structure indices) of the indices the model holds. ``at`` is int32, as
    HiGHS takes positions (so are the positions); HiGHS takes a set in any order (it sorts the
    set with its data)."""
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


def _changed_pair(
    new_lo: np.ndarray, old_lo: np.ndarray, new_up: np.ndarray, old_up: np.ndarray
) -> np.ndarray:
    """Indices where either bound moved (sorted)."""
    changed: np.ndarray = ((new_lo != old_lo) | (new_up != old_up)).nonzero()[0]
    return changed


def quiet_highs() -> highspy.Highs:
    """A HiGHS instance that never prints. ``highspy.Highs()`` calls into HiGHS (to enable its
    callbacks) before an option can be set, and that first call prints the version banner on
    stdout; the core class under it takes ``output_flag`` first. The planner uses no callbacks."""
    highs = highspy._Highs()  # type: ignore[attr-defined]
    highs.setOptionValue("output_flag", False)
    return highs  # type: ignore[no-any-return]


def _restart_from_basis(highs: highspy.Highs) -> None:
    """Start the next solve from the current basis with fresh simplex data. Without a matrix
    change HiGHS resumes with what it kept from the last solve (edge weights, perturbed costs);
    after this model's per-step cost and bound changes that resumption took more pivots than a
    fresh start from the same basis (seed scale, 200 decisions: p90 160 -> 62 iterations, the
    same optima)."""
    basis = highs.getBasis()
    if basis.valid:
        highs.clearSolver()
        highs.setBasis(basis)


SMALL_MODEL_ROWS = 4_000
"""A model with up to this many rows is small: HiGHS holds only its live part, and prices with
Devex, without cost perturbation and without restarting from a cleared solver.

Live part: a warm solve of a small model is mostly HiGHS's fixed per-run work, proportional to
the model's size, and about half a seed-scale model is empty job slots and rows that cannot bind
(seed scale: ~1,800 of 3,313 columns and ~1,100 of 1,620 rows held; HiGHS's run 23.8M -> 12.5M
instructions per decision). On a large model the iterations dominate, and HiGHS's cost
perturbation, drawn by column position, would change as held columns come and go (2,000 jobs:
p50 1.5x slower).

Pricing: after a restart from the kept basis (see _restart_from_basis) the dual simplex's default
steepest-edge pricing first computes exact weights, one solve with the basis per row: at seed
scale (~45 iterations per update) that cost as much as the iterations it saved, and perturbed
costs had to be cleaned up after (100 seed decisions: 47.2M -> 43.4M instructions per decision
with Devex and no perturbation). With those, restarting changes no pivot, so a small model keeps
HiGHS's state. On larger models steepest edge pays for itself: at 500 jobs (~15,000 rows) Devex
was 1.7x slower, at 2,000 jobs 3x (every decision over its budget)."""
DEVEX = 1
DEAD_SHARE = 0.05
"""Held columns and rows no longer live are deleted once they are this share of the model (more
than the ones the last deletion had to keep): fewer deletions, each a basis lookup."""


class HighsSession:
    """One persistent HiGHS model of a structure: all of it, or its live part when it is small.

    While the structure holds, the model is updated in place: columns and rows no longer live are
    deleted once the basis lets them go (a nonbasic column, a row with a basic slack: the basis
    stays valid), those that came alive are added (an added row's slack is basic, an added column
    nonbasic: still valid), and the others get the step's costs and bounds. A new structure is
    passed fresh, starting from the old basis carried over (optimizer/basis_carry.py) when the
    planner gives that match.
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
        self._kept_basis: tuple[np.ndarray, np.ndarray] | None = None
        self.rebuilds = 0
        self.updates = 0

    def _fresh(self, time_limit_s: float, small: bool) -> highspy.Highs:
        highs = quiet_highs()
        highs.setOptionValue("threads", 1)
        highs.setOptionValue("time_limit", float(time_limit_s))
        if small:
            highs.setOptionValue("simplex_dual_edge_weight_strategy", DEVEX)
            highs.setOptionValue("dual_simplex_cost_perturbation_multiplier", 0.0)
        return highs

    def forget(self, keep_basis: bool = False) -> None:
        """Drop the live model (its structure is gone); the next load passes a fresh one. With
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
        cols[self._cols] = [s.value for s in basis.col_status]
        rows[self._rows] = [s.value for s in basis.row_status]
        return cols, rows

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

    @property
    def held(self) -> tuple[int, int]:
        """(columns, rows) the HiGHS model holds now."""
        return self._cols.size, self._rows.size

    def holds(self, key: str) -> bool:
        """Whether the live model has this structure (so coefficient changes can be applied)."""
        return self._highs is not None and self._key == key and self._params is not None

    def _hold(self, cols: np.ndarray, rows: np.ndarray, n_cols: int, n_rows: int) -> None:
        self._cols, self._rows = cols, rows
        self._col_at, self._row_at = positions(cols, n_cols), positions(rows, n_rows)

    def _live_parts(self, structure: ModelStructure, params: Parameters) -> tuple[np.ndarray, np.ndarray]:
        """What HiGHS holds: the live part of a small model, all of a larger one."""
        if self._activity is not None:
            return live_parts(self._activity, params)
        return np.ones(structure.n_cols, dtype=bool), np.ones(structure.n_rows, dtype=bool)

    def _pass_fresh(
        self, structure: ModelStructure, params: Parameters, time_limit_s: float
    ) -> highspy.Highs:
        small = structure.n_rows <= SMALL_MODEL_ROWS
        self._activity = ActivityBounds(structure.matrix) if small else None
        live_col, live_row = self._live_parts(structure, params)
        self._hold(np.flatnonzero(live_col), np.flatnonzero(live_row), structure.n_cols, structure.n_rows)
        self._stuck = 0
        highs = self._fresh(time_limit_s, small)
        entries = column_entries(structure.matrix, self._cols, self._row_at)
        highs.passModel(_to_highs_lp(params, self._cols, self._rows, entries))
        return highs

    def _drop_dead(self, highs: highspy.Highs, keep_col: np.ndarray, keep_row: np.ndarray) -> bool:
        """Delete held columns and rows that are no longer live, once there are enough of them to
        pay for the basis lookup (a dead column or row held is harmless: fixed at zero, or unable
        to bind). Only what leaves the basis valid goes: a nonbasic column, a row whose slack is
        basic; the rest waits for a later basis. True when something was deleted."""
        dead = (
            keep_col.size - int(np.count_nonzero(keep_col)) + keep_row.size - int(np.count_nonzero(keep_row))
        )
        if dead - self._stuck <= DEAD_SHARE * (keep_col.size + keep_row.size):
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

    def _update(
        self,
        highs: highspy.Highs,
        structure: ModelStructure,
        params: Parameters,
        old: Parameters,
        coefficients: EntryChanges | None,
    ) -> None:
        """Bring the held model to ``params``: drop what died, update what stays, add what is new."""
        matrix = structure.matrix
        if coefficients is not None and coefficients.at.size and self._activity is not None:
            self._activity.set(coefficients.at, coefficients.values)
        live_col, live_row = self._live_parts(structure, params)
        keep_col, keep_row = live_col[self._cols], live_row[self._rows]
        if self._drop_dead(highs, keep_col, keep_row):
            self._hold(self._cols[keep_col], self._rows[keep_row], structure.n_cols, structure.n_rows)
        col_at, row_at = self._col_at, self._row_at
        idx = _held(col_at, _changed(params.cost, old.cost))
        if idx[0].size:
            highs.changeColsCost(idx[0].size, idx[0], params.cost[idx[1]])
        idx = _held(col_at, _changed_pair(params.col_lower, old.col_lower, params.col_upper, old.col_upper))
        if idx[0].size:
            highs.changeColsBounds(idx[0].size, idx[0], params.col_lower[idx[1]], params.col_upper[idx[1]])
        idx = _held(row_at, _changed_pair(params.row_lower, old.row_lower, params.row_upper, old.row_upper))
        if idx[0].size:
            highs.changeRowsBounds(  # type: ignore[attr-defined]
                idx[0].size, idx[0], params.row_lower[idx[1]], params.row_upper[idx[1]]
            )
        if coefficients is not None:
            changed = (coefficients.rows, coefficients.cols, coefficients.values)
            for row, col, value in zip(*(c.tolist() for c in changed), strict=True):
                if row_at[row] >= 0 and col_at[col] >= 0:
                    highs.changeCoeff(int(row_at[row]), int(col_at[col]), value)
        new_rows = (live_row & (row_at < 0)).nonzero()[0]
        new_cols = (live_col & (col_at < 0)).nonzero()[0]
        if new_rows.size:
            bounds = (params.row_lower[new_rows], params.row_upper[new_rows])
            entries = row_entries(matrix, new_rows, col_at)
            self._rows = _append(highs.addRows, new_rows, bounds, entries, self._rows, row_at)
        if new_cols.size:
            data = (params.cost[new_cols], params.col_lower[new_cols], params.col_upper[new_cols])
            entries = column_entries(matrix, new_cols, row_at)
            self._cols = _append(highs.addCols, new_cols, data, entries, self._cols, col_at)

    def load(
        self,
        structure: ModelStructure,
        params: Parameters,
        time_limit_s: float,
        coefficients: EntryChanges | None = None,
        carry: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> bool:
        """Make the session's model the live part of (structure, params); True when updated in
        place (``coefficients``: the matrix entries of job slots taken over by a job with another
        gang size, already written into the structure's matrix). A fresh model
        starts from the basis kept by ``forget(keep_basis=True)`` through ``carry`` when both are
        there."""
        old = self._params
        if self._highs is not None and self._key == structure.key and old is not None:
            self._update(self._highs, structure, params, old, coefficients)
            self._params = params
            if self._activity is None:  # a small model: Devex, no perturbation, nothing to reset
                _restart_from_basis(self._highs)
            self.updates += 1
            return True
        highs = self._pass_fresh(structure, params, time_limit_s)
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
        while_solving: Callable[[], None] | None = None,
    ) -> SolveOutcome:
        """Load and solve. ``while_solving`` is called right before HiGHS runs: HiGHS releases the
        GIL while it solves, so work it starts on another thread proceeds meanwhile."""
        try:
            warm = self.load(structure, params, time_limit_s, coefficients, carry)
            assert self._highs is not None
            highs = self._highs
            # HiGHS's clock runs across calls on one instance: the limit is relative to it
            highs.setOptionValue("time_limit", float(highs.getRunTime()) + float(time_limit_s))
            if while_solving is not None:
                while_solving()
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
            values = highs.getSolution().col_value  # a list: fromiter reads it in one pass
            x = np.zeros(structure.n_cols)  # columns not held are fixed at zero
            x[self._cols] = np.fromiter(values, dtype=float, count=len(values))
            _, iterations = highs.getInfoValue("simplex_iteration_count")
            return SolveOutcome(
                True, name, x, float(highs.getObjectiveValue()), solver_ms, warm, iterations=int(iterations)
            )
        except Exception as exc:
            self._highs, self._key, self._params = None, None, None
            return SolveOutcome(False, "error", None, float("nan"), 0.0, False, f"HiGHS error: {exc!r}")

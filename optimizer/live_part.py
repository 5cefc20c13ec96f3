"""The live part of the horizon LP: the columns and rows HiGHS is given (an exact, cheap presolve).

The persistent model keeps a column for every job slot in every block, including slots that hold
no job and placements a job cannot take this step (bounds [0, 0]), and rows that cannot bind this
step (a keep-running or preemption-link row of a job that is not running: any activity its columns
allow lies within its bounds). At seed scale that is about half the model. HiGHS's presolve would
drop them, but it does not run when a solve starts from a basis, and a warm solve's fixed work
(model checks, factorization set-up, optimality checks) grows with the model's size. So HiGHS
holds only the live part: the columns not fixed at zero and the rows their bounds could violate.
The optimum is the same: a dropped column is zero, a dropped row holds for every value the live
columns can take. Index bookkeeping only; the solver session (optimizer/solve_highs.py) applies it.

Measured (seed scale, 200 decisions, 8 same-minute A/B pairs against the whole model, noisy 2-core
host): HiGHS holds ~1,470 of 3,033 columns and ~820 of 1,340 rows; HiGHS's solve p50 1.69 ->
1.19 ms (median paired gain 0.53 ms), decision p50 5.76 -> 5.60 ms (median paired gain 0.33 ms,
ratio 0.94; the bookkeeping costs ~0.2 ms of what HiGHS saves). HiGHS options do not close the
gap (no scaling: -0.12 ms; no initial condition check: -0.02 ms), nor does leaving out only the
columns fixed at zero when the model is passed (-0.17 ms: without deletes the held columns grow
back to ~2,600).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse

from optimizer.formulation import ColumnMatrix
from optimizer.parameters import Parameters


@dataclass(frozen=True)
class Entries:
    """Matrix entries of some columns (or rows), compressed, indexed into the live model."""

    start: np.ndarray  # int32 [n + 1]
    index: np.ndarray  # int32: live row (or column) of each entry
    value: np.ndarray


HUGE = 1e30
"""Infinite bounds enter the activity sums as +-HUGE: a zero entry times HUGE stays 0 (where
times inf would be nan), and a sum with a HUGE term still passes any finite row bound."""


class ActivityBounds:
    """The least and greatest activity of every row within the column bounds, as one sparse
    product with [lower; upper]: a row's least activity takes each positive entry at its column's
    lower bound, then each negative entry at its upper bound (in row order within each part); its
    greatest the other way round. These are the sums of [[P, N], [N, P]] @ [lower; upper] (P the
    matrix's positive entries, N its negative ones), in the same order, without its zeros. An
    entry changed in place keeps its two places while its sign stays; a sign change rebuilds."""

    def __init__(self, matrix: ColumnMatrix) -> None:
        self._n_rows, self._n_cols = matrix.n_rows, matrix.indptr.size - 1
        self._row_ptr, self._order = matrix.by_row  # entries row by row, as positions into data
        self._rows = matrix.indices[self._order]
        self._cols = matrix.entry_cols[self._order]
        self._data = matrix.data.copy()  # by position in the column matrix's data
        self._build()

    def _build(self) -> None:
        values = self._data[self._order]
        negative = values < 0.0
        nnz = values.size
        # lexsort is stable and sorts by its last key first: row by row, then the terms taken at
        # a lower bound (least: positive entries; greatest: negative ones), each part in row order
        least = np.lexsort((negative, self._rows))
        greatest = np.lexsort((~negative, self._rows))
        at_upper = np.concatenate([negative[least], ~negative[greatest]])
        indices = np.concatenate([self._cols[least], self._cols[greatest]]) + self._n_cols * at_upper
        indptr = np.concatenate([self._row_ptr, nnz + self._row_ptr[1:]])
        data = np.concatenate([values[least], values[greatest]])
        self._product = sparse.csr_matrix((data, indices, indptr), shape=(2 * self._n_rows, 2 * self._n_cols))
        self._slots = np.empty((2, nnz), dtype=np.int64)  # by entry: its least term, its greatest term
        self._slots[0, self._order[least]] = np.arange(nnz)
        self._slots[1, self._order[greatest]] = nnz + np.arange(nnz)
        self._negative = self._data < 0.0

    def set(self, entries: np.ndarray, values: np.ndarray) -> None:
        """Entries (positions in the column matrix's data) now hold ``values``."""
        self._data[entries] = values
        if ((values < 0.0) != self._negative[entries]).any():  # a term moves to the other bound
            self._build()
        else:
            self._product.data[self._slots[:, entries]] = values

    def __call__(self, lower: np.ndarray, upper: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(least, greatest) activity of each row."""
        bounds = np.clip(np.concatenate([lower, upper]), -HUGE, HUGE)
        both = self._product @ bounds
        return both[: self._n_rows], both[self._n_rows :]


def live_parts(activity: ActivityBounds, params: Parameters) -> tuple[np.ndarray, np.ndarray]:
    """(live column mask, live row mask): columns not fixed at zero, rows that could bind."""
    live_col = (params.col_lower != 0.0) | (params.col_upper != 0.0)
    least, greatest = activity(params.col_lower, params.col_upper)
    live_row = ~((least >= params.row_lower) & (greatest <= params.row_upper))
    return live_col, live_row


def positions(members: np.ndarray, size: int) -> np.ndarray:
    """[size] position of each index in ``members``, -1 for the others."""
    at = np.full(size, -1, dtype=np.int32)
    at[members] = np.arange(members.size, dtype=np.int32)
    return at


def _gathered(
    starts: np.ndarray, ends: np.ndarray, order: np.ndarray | None, other: np.ndarray, held_at: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The stored entries in the ranges [starts, ends) (of ``order`` when given) whose other index
    (``other``: their row, or column) the live model holds: (positions in ``data``, live index,
    compressed start of each range)."""
    width = ends - starts
    bounds = np.zeros(starts.size + 1, dtype=np.int64)
    width.cumsum(out=bounds[1:])
    at = (starts - bounds[:-1]).repeat(width) + np.arange(bounds[-1])
    if order is not None:
        at = order[at]
    live = held_at[other[at]]
    keep = live >= 0
    kept = np.zeros(at.size + 1, dtype=np.int32)
    keep.cumsum(out=kept[1:])
    return at[keep], live[keep], kept[bounds]


def column_entries(matrix: ColumnMatrix, cols: np.ndarray, row_at: np.ndarray) -> Entries:
    """The entries of ``cols`` in the rows the live model holds (``row_at`` >= 0)."""
    at, rows, start = _gathered(matrix.indptr[cols], matrix.indptr[cols + 1], None, matrix.indices, row_at)
    return Entries(start, rows, matrix.data[at])  # rows: int32, as row_at is


def row_entries(matrix: ColumnMatrix, rows: np.ndarray, col_at: np.ndarray) -> Entries:
    """The entries of ``rows`` in the columns the live model holds (``col_at`` >= 0)."""
    row_ptr, order = matrix.by_row
    at, cols, start = _gathered(row_ptr[rows], row_ptr[rows + 1], order, matrix.entry_cols, col_at)
    return Entries(start, cols, matrix.data[at])  # cols: int32, as col_at is

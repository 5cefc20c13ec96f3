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
    product: [[P, N], [N, P]] @ [lower; upper], where P holds the matrix's positive entries and N
    its negative ones (each over the whole pattern, the other sign's entries held as zeros, so an
    entry changed in place keeps its place)."""

    def __init__(self, matrix: ColumnMatrix) -> None:
        n_rows, n_cols, nnz = matrix.n_rows, matrix.indptr.size - 1, matrix.data.size
        row_ptr, order = matrix.by_row
        rows = matrix.indices[order]
        width = np.diff(row_ptr)[rows]
        first = 2 * row_ptr[rows] + (np.arange(nnz) - row_ptr[rows])  # own-sign block, top half
        cols = matrix.entry_cols[order]
        indices = np.empty(4 * nnz, dtype=np.int32)
        # top rows: P at (row, col), N at (row, n + col); bottom rows: N at (row, col), P at (row, n + col)
        self._slots = np.empty((4, nnz), dtype=np.int64)  # by entry: P top, N top, N bottom, P bottom
        self._slots[:, order] = [first, first + width, 2 * nnz + first, 2 * nnz + first + width]
        indices[first], indices[first + width] = cols, n_cols + cols
        indices[2 * nnz + first], indices[2 * nnz + first + width] = cols, n_cols + cols
        indptr = np.concatenate([2 * row_ptr, 2 * nnz + 2 * row_ptr[1:]])
        self._n_rows = n_rows
        self._stacked = sparse.csr_matrix(
            (np.zeros(4 * nnz), indices, indptr), shape=(2 * n_rows, 2 * n_cols)
        )
        self.set(np.arange(nnz), matrix.data)

    def set(self, entries: np.ndarray, values: np.ndarray) -> None:
        """Entries (positions in the column matrix's data) now hold ``values``."""
        positive, negative = np.maximum(values, 0.0), np.minimum(values, 0.0)
        data = self._stacked.data
        data[self._slots[0, entries]] = positive
        data[self._slots[1, entries]] = negative
        data[self._slots[2, entries]] = negative
        data[self._slots[3, entries]] = positive

    def __call__(self, lower: np.ndarray, upper: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(least, greatest) activity of each row."""
        bounds = np.clip(np.concatenate([lower, upper]), -HUGE, HUGE)
        both = self._stacked @ bounds
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
    bounds = np.zeros(starts.size + 1, dtype=np.int64)
    np.cumsum(ends - starts, out=bounds[1:])
    at = np.repeat(starts - bounds[:-1], ends - starts) + np.arange(bounds[-1])
    if order is not None:
        at = order[at]
    live = held_at[other[at]]
    keep = live >= 0
    kept = np.zeros(at.size + 1, dtype=np.int32)
    np.cumsum(keep, out=kept[1:])
    return at[keep], live[keep], kept[bounds]


def column_entries(matrix: ColumnMatrix, cols: np.ndarray, row_at: np.ndarray) -> Entries:
    """The entries of ``cols`` in the rows the live model holds (``row_at`` >= 0)."""
    at, rows, start = _gathered(matrix.indptr[cols], matrix.indptr[cols + 1], None, matrix.indices, row_at)
    return Entries(start, rows.astype(np.int32), matrix.data[at])


def row_entries(matrix: ColumnMatrix, rows: np.ndarray, col_at: np.ndarray) -> Entries:
    """The entries of ``rows`` in the columns the live model holds (``col_at`` >= 0)."""
    row_ptr, order = matrix.by_row
    at, cols, start = _gathered(row_ptr[rows], row_ptr[rows + 1], order, matrix.entry_cols, col_at)
    return Entries(start, cols.astype(np.int32), matrix.data[at])

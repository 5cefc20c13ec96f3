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

from optimizer.formulation import ColumnMatrix
from optimizer.parameters import Parameters


@dataclass(frozen=True)
class Entries:
    """Matrix entries of some columns (or rows), compressed, indexed into the live model."""

    start: np.ndarray  # int32 [n + 1]
    index: np.ndarray  # int32: live row (or column) of each entry
    value: np.ndarray


def row_activity_bounds(
    matrix: ColumnMatrix, n_rows: int, lower: np.ndarray, upper: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(least, greatest) value each row's activity can take within the column bounds."""
    data = matrix.data
    lower_e, upper_e = lower[matrix.entry_cols], upper[matrix.entry_cols]
    positive = data > 0
    with np.errstate(invalid="ignore"):  # 0 x inf: nan, which no comparison accepts (row kept)
        least = np.bincount(matrix.indices, data * np.where(positive, lower_e, upper_e), minlength=n_rows)
        greatest = np.bincount(matrix.indices, data * np.where(positive, upper_e, lower_e), minlength=n_rows)
    return least, greatest


def live_parts(matrix: ColumnMatrix, params: Parameters) -> tuple[np.ndarray, np.ndarray]:
    """(live column mask, live row mask): columns not fixed at zero, rows that could bind."""
    live_col = (params.col_lower != 0.0) | (params.col_upper != 0.0)
    least, greatest = row_activity_bounds(matrix, params.row_lower.size, params.col_lower, params.col_upper)
    live_row = ~((least >= params.row_lower) & (greatest <= params.row_upper))
    return live_col, live_row


def positions(members: np.ndarray, size: int) -> np.ndarray:
    """[size] position of each index in ``members``, -1 for the others."""
    at = np.full(size, -1, dtype=np.int32)
    at[members] = np.arange(members.size, dtype=np.int32)
    return at


def _ranges(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The concatenation of arange(s, e) for each pair."""
    lengths = ends - starts
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.cumsum(lengths) - lengths
    return np.repeat(starts - offsets, lengths) + np.arange(total)


def _compressed(owner: np.ndarray, n: int, index: np.ndarray, value: np.ndarray) -> Entries:
    start = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(owner, minlength=n), out=start[1:])
    return Entries(start, index.astype(np.int32), value)


def column_entries(matrix: ColumnMatrix, cols: np.ndarray, row_at: np.ndarray) -> Entries:
    """The entries of ``cols`` in the rows the live model holds (``row_at`` >= 0)."""
    at = _ranges(matrix.indptr[cols], matrix.indptr[cols + 1])
    rows = row_at[matrix.indices[at]]
    keep = rows >= 0
    owner = np.repeat(np.arange(cols.size), np.diff(matrix.indptr)[cols])[keep]
    return _compressed(owner, cols.size, rows[keep], matrix.data[at[keep]])


def row_entries(matrix: ColumnMatrix, rows: np.ndarray, col_at: np.ndarray) -> Entries:
    """The entries of ``rows`` in the columns the live model holds (``col_at`` >= 0)."""
    row_ptr, order = matrix.by_row
    at = order[_ranges(row_ptr[rows], row_ptr[rows + 1])]
    cols = col_at[matrix.entry_cols[at]]
    keep = cols >= 0
    owner = np.repeat(np.arange(rows.size), np.diff(row_ptr)[rows])[keep]
    return _compressed(owner, rows.size, cols[keep], matrix.data[at[keep]])

"""Carrying the solver's basis across a model rebuild (a new slot layout), so it stays a warm start.

The persistent model is rebuilt when the job slots are laid out again (optimizer/slots.py): a
class ran out of slots, or most slots stayed empty. The new matrix has the same services, pools
and blocks and mostly the same jobs at other positions. Each column and row of the new model is
matched to the same column or row of the old one (a job's by its id, a service's by position, a
Hall row by its pool set, a quota row by its team); the old basis status is carried over and
HiGHS starts from it. What has no match starts nonbasic (columns) or basic (rows); HiGHS repairs
the basis if the count of basic variables is off (an "alien" basis). Pure index bookkeeping.
Part of pipeline stage 3 (optimizer/model_update.py). At 2,000 jobs a rebuild's solve took 143 ms
from the carried basis against 449 ms cold (p50, measured as described in optimizer/planner.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from optimizer.formulation import ModelStructure

SLOT_COLUMN_GROUPS = ("yb", "pre", "late")
SLOT_ROW_GROUPS = ("gang0", "work", "preempt_link", "keep_running", "deadline")
SERVICE_COLUMN_GROUPS = ("R", "G", "up0", "up1")
"""Indexed by (service, pool) pair: carried only when the pairs are the same."""
SHARED_ROW_GROUPS = (
    "preempt_bound",
    "cap0",
    "cover",
    "pack",
    "dedicated",
    "min_replicas",
    "max_replicas",
    "scale_up0",
    "scale_up",
    "kept",
    "scale_up1",
)

BASIC = 1
LOWER = 0
UPPER = 2


def carried_indices(
    old: ModelStructure, old_ids: Sequence[str], new: ModelStructure, new_ids: Sequence[str]
) -> tuple[np.ndarray, np.ndarray]:
    """For each column and each row of ``new``: the same one in ``old``, or -1."""
    col_src = np.full(new.n_cols, -1, dtype=np.int64)
    row_src = np.full(new.n_rows, -1, dtype=np.int64)
    old_slot = {job_id: s for s, job_id in enumerate(old_ids) if job_id}
    source = np.asarray([old_slot.get(job_id, -1) if job_id else -1 for job_id in new_ids], dtype=np.int64)
    kept = np.flatnonzero(source >= 0)
    for name in SLOT_COLUMN_GROUPS:
        _carry_slots(col_src, old.cols[name], new.cols[name], kept, source)
    for name in SLOT_ROW_GROUPS:
        _carry_slots(row_src, old.rows[name], new.rows[name], kept, source)
    _carry_step0_placements(col_src, old, len(old_ids), new, source)
    same_pairs = np.array_equal(old.sp_pairs, new.sp_pairs) and np.array_equal(old.sp_shared, new.sp_shared)
    for name in SERVICE_COLUMN_GROUPS:
        if same_pairs:
            _carry_same_shape(col_src, old.cols[name], new.cols[name])
    for name in ("short", "minshort", "up", "move_short"):
        _carry_same_shape(col_src, old.cols[name], new.cols[name])
    for name in SHARED_ROW_GROUPS:
        if same_pairs or name not in ("pack", "dedicated", "scale_up0", "scale_up1"):
            _carry_same_shape(row_src, old.rows[name], new.rows[name])
    old_sets = {row.tobytes(): f for f, row in enumerate(old.hall_sets)}
    for f, row in enumerate(new.hall_sets):
        g = old_sets.get(row.tobytes())
        if g is not None and old.rows["hall"].shape[1:] == new.rows["hall"].shape[1:]:
            row_src[new.rows["hall"][f]] = old.rows["hall"][g]
    old_teams = {team: t for t, team in enumerate(old.quota_teams)}
    for t, team in enumerate(new.quota_teams):
        u = old_teams.get(team)
        if u is not None and old.rows["quota"].shape[1:] == new.rows["quota"].shape[1:]:
            row_src[new.rows["quota"][t]] = old.rows["quota"][u]
            col_src[new.cols["borrow"][t]] = old.cols["borrow"][u]
    if old.rows["lending"].shape == new.rows["lending"].shape:
        _carry_same_shape(row_src, old.rows["lending"], new.rows["lending"])
    return col_src, row_src


def _carry_step0_placements(
    src: np.ndarray, old: ModelStructure, old_slots: int, new: ModelStructure, source: np.ndarray
) -> None:
    """Step-0 placements, one column per (slot, allowed pool): a new one takes the old column of
    its job's old slot in the same pool, if there was one (a lookup table over old slot x pool)."""
    if not (old.y0_pairs.size and new.y0_pairs.size):
        return
    n_pools = int(max(old.y0_pairs[:, 1].max(), new.y0_pairs[:, 1].max())) + 1
    old_column = np.full(old_slots * n_pools, -1, dtype=np.int64)
    old_column[old.y0_pairs[:, 0] * n_pools + old.y0_pairs[:, 1]] = old.cols["y0"]
    slot, pool = new.y0_pairs[:, 0], new.y0_pairs[:, 1]
    was = source[slot]
    matched = was >= 0
    src[new.cols["y0"][matched]] = old_column[was[matched] * n_pools + pool[matched]]


def _carry_slots(
    src: np.ndarray, old_idx: np.ndarray, new_idx: np.ndarray, kept: np.ndarray, source: np.ndarray
) -> None:
    if old_idx.shape[1:] == new_idx.shape[1:] and kept.size:
        src[new_idx[kept]] = old_idx[source[kept]]


def _carry_same_shape(src: np.ndarray, old_idx: np.ndarray, new_idx: np.ndarray) -> None:
    if old_idx.shape == new_idx.shape:
        src[new_idx] = old_idx


def carried_status(
    old_status: np.ndarray, src: np.ndarray, unmatched: int, lower: np.ndarray, upper: np.ndarray
) -> np.ndarray:
    """Basis status of each new column (or row) from its match; ``unmatched`` where none. A
    nonbasic status is moved to a finite bound of the new model (HiGHS's kLower/kUpper)."""
    status = np.where(src >= 0, old_status[np.maximum(src, 0)], unmatched).astype(np.int8)
    at_upper = status == UPPER
    status[at_upper & ~np.isfinite(upper)] = LOWER
    at_lower = status == LOWER
    status[at_lower & ~np.isfinite(lower) & np.isfinite(upper)] = UPPER
    free = ~np.isfinite(lower) & ~np.isfinite(upper)
    status[free & (status != BASIC)] = BASIC
    return status

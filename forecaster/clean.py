"""History hygiene before any model sees it: the forecaster's input gate. Pure.

Safe repairs are made and noted (the notes end up in DemandForecast.degraded_reason): short runs
of missing, NaN, infinite or negative values are interpolated, tiny negative rounding errors are
clipped, leading gaps dropped, history before a long gap dropped, unsorted timestamps sorted,
exact duplicate rows dropped, missing timestamps filled as gaps. What cannot be repaired safely is
rejected with a HistoryError naming the field: no usable value at all, duplicate timestamps with
different values, timestamps off a regular grid.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float64]
History = Sequence[float] | NDArray[np.float64]
"""A demand history: busy GPUs per step, oldest first (a list or a float array)."""
DEFAULT_MAX_GAP_STEPS = 4
_ROUNDING = 1e-6


class HistoryError(ValueError):
    """A demand history that cannot be used safely; the message names the field and the reason."""


@dataclass(frozen=True)
class CleanHistory:
    values: Array
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class CleanSeries:
    start_s: float
    step_s: int
    values: Array
    notes: list[str] = field(default_factory=list)


def _runs(mask: NDArray[np.bool_]) -> list[tuple[int, int]]:
    """[start, end) of each run of True."""
    padded = np.concatenate([[False], mask, [False]]).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    return list(zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True))


def as_numbers(history: History) -> NDArray[np.float64]:
    """The history as a new flat float array (NaN and negatives kept), or a HistoryError naming it."""
    try:
        return np.array(history, dtype=float).ravel()
    except (TypeError, ValueError) as exc:
        raise HistoryError(f"demand_history: not a sequence of numbers ({exc})") from exc


def clean_values(history: History, *, max_gap_steps: int = DEFAULT_MAX_GAP_STEPS) -> CleanHistory:
    """Repair a regular-step demand history (busy GPUs per step, oldest first) or reject it."""
    values = as_numbers(history)
    notes: list[str] = []
    if values.size == 0:
        raise HistoryError("demand_history: empty")
    finite = np.isfinite(values)
    scale = float(np.max(np.abs(values[finite]))) if finite.any() else 0.0
    tiny_negative = finite & (values < 0) & (values >= -_ROUNDING * max(scale, 1.0))
    values[tiny_negative] = 0.0
    bad = ~finite | (values < 0)
    if bad.all():
        raise HistoryError("demand_history: no finite non-negative value")
    if bad.any():
        notes.append(f"{int(bad.sum())} NaN/infinite/negative values treated as missing")
    values[bad] = np.nan
    long_runs = [(a, b) for a, b in _runs(bad) if b - a > max_gap_steps and b < values.size]
    if long_runs:
        cut = long_runs[-1][1]
        notes.append(f"gap of {long_runs[-1][1] - long_runs[-1][0]} steps: history before it dropped")
        values = values[cut:]
    first = int(np.flatnonzero(~np.isnan(values))[0])
    values = values[first:]
    missing = np.isnan(values)
    if missing.any():
        known = np.flatnonzero(~missing)
        values[missing] = np.interp(np.flatnonzero(missing), known, values[known])
        notes.append(f"{int(missing.sum())} missing steps interpolated")
    return CleanHistory(values=values, notes=notes)


def clean_series(
    times_s: History,
    values: History,
    *,
    max_gap_steps: int = DEFAULT_MAX_GAP_STEPS,
) -> CleanSeries:
    """Put (time, value) rows on a regular grid: sort, drop exact duplicates, fill missing times.
    ``times_s`` are seconds (any epoch). Rejects conflicting duplicates and irregular spacing."""
    times = np.asarray(times_s, dtype=float)
    vals = np.asarray(values, dtype=float)
    if times.shape != vals.shape:
        raise HistoryError(f"time/value: {times.size} times but {vals.size} values")
    notes: list[str] = []
    known_time = np.isfinite(times)
    if not known_time.all():
        notes.append(f"{int((~known_time).sum())} rows without a time dropped")
        times, vals = times[known_time], vals[known_time]
    if times.size < 2:
        raise HistoryError(f"time: {times.size} usable rows, need at least 2")
    if np.any(np.diff(times) < 0):
        notes.append("rows sorted by time")
    order = np.argsort(times, kind="stable")
    times, vals = times[order], vals[order]
    same = np.flatnonzero(np.diff(times) == 0)
    if same.size:
        a, b = vals[same], vals[same + 1]
        conflict = ~((a == b) | (np.isnan(a) & np.isnan(b)))
        if conflict.any():
            at = times[same[conflict][0]]
            raise HistoryError(
                f"time: duplicate timestamp {at:.0f} s with different values "
                f"({a[conflict][0]} and {b[conflict][0]}); aggregate the rows first"
            )
        keep = np.ones(times.size, dtype=bool)
        keep[same + 1] = False
        times, vals = times[keep], vals[keep]
        notes.append(f"{same.size} duplicate rows dropped")
    gaps = np.diff(times)
    step = float(np.median(gaps))
    ratio = gaps / step
    if step <= 0 or np.any(np.abs(ratio - np.round(ratio)) > 0.01):
        raise HistoryError(f"time: timestamps are not on a regular grid (median step {step:.0f} s)")
    index = np.round((times - times[0]) / step).astype(int)
    grid = np.full(index[-1] + 1, np.nan)
    grid[index] = vals
    if grid.size > times.size:
        notes.append(f"{grid.size - times.size} missing timestamps")
    cleaned = clean_values(grid.tolist(), max_gap_steps=max_gap_steps)
    dropped = grid.size - cleaned.values.size
    return CleanSeries(
        start_s=float(times[0] + dropped * step),
        step_s=round(step),
        values=cleaned.values,
        notes=notes + cleaned.notes,
    )

"""Level shifts: a step change in demand that the history never showed, followed within a few steps.

A fitted model (forecaster/models.py) forecasts from its seasonal profiles and a level learned on
the past; after a step change it keeps forecasting the old level until enough of the new one is
in its window (seasonal naive a day, MSTL's daily level a day, a refit none sooner), and an
adaptive model (Holt-Winters) moves only part of the way at first. At every step-time forecast
(forecaster/auto.py ``predict_quantiles``) the model's own forecasts of the last steps, made from
just before them, are compared with what happened. When each of at least ``SHIFT_STEPS`` latest
steps lies beyond the calibrated 90% band on the same side (the criterion the ForecastBank uses
for drift) and their median miss lies beyond the 98% band (a run just past the 90% band's edge
is persistent noise, the calibrator's to correct), the level has moved n steps ago (n: the
longest such run, up to a day): the forecast is then the model's forecast from before the move,
continued, plus the median miss since the move. Referring both to the state before the move
counts the shift once, however much the model already adapted (and the planner's calibrator adds
only what the forecast has not moved, optimizer/calibration.py). Otherwise nothing changes. Pure
(sqrt space, as the models).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from forecaster.models import Array, Fitted, from_model_space

SHIFT_STEPS = 3
"""Consecutive model steps beyond the 90% band, on one side, that mark a level shift."""

MAX_FACTOR = 20.0
"""The largest move (either way) one shift records: demand that drops to nothing would scale
the history before it to nothing, and a later move back by an unbounded factor."""


def _beyond(misses: Array, low: Array, high: Array) -> int:
    """+1 when every miss lies above its band, -1 when every one lies below, else 0."""
    if np.all(misses > high[: misses.size]):
        return 1
    if np.all(misses < low[: misses.size]):
        return -1
    return 0


def _beyond_noise(misses: Array, offsets: dict[str, Array]) -> bool:
    """Whether the typical (median) miss of the run lies beyond the 98% band on its side: a run
    just past the 90% band's edge is noise that persists for a while, which the planner's
    calibrator corrects by how much of a miss persists (optimizer/calibration.py); a level shift
    is a move the band has no room for. (Without a 98% band, the 90% band's.)"""
    typical = float(np.median(misses))
    key = ("p99" if "p99" in offsets else "p95") if typical > 0 else ("p01" if "p01" in offsets else "p05")
    edge = float(np.median(np.abs(_band(offsets, key, misses.size))))
    return abs(typical) > edge


def _band(offsets: dict[str, Array], key: str, size: int) -> Array:
    """A band offset by horizon for ``size`` horizons (its last value repeated where shorter)."""
    offset = offsets[key]
    if offset.size >= size:
        return offset[:size]
    return np.concatenate([offset, np.full(size - offset.size, offset[-1] if offset.size else 0.0)])


@dataclass(frozen=True)
class Shift:
    """A level shift the latest history shows: the level moved ``steps_ago`` model steps ago."""

    steps_ago: int
    miss: float
    """The median miss since the move (sqrt space): what the forecast adds to the model's."""
    factor: float
    """Demand since the move over the model's forecast of it from before (busy GPUs): what the
    ForecastBank scales the history before the move by once it absorbs the shift."""


def find_shift(
    fitted: Fitted,
    z: Array,
    offsets: dict[str, Array],
    *,
    day: int,
    min_history: int,
    steps_since_fit: int = 0,
) -> Shift | None:
    """The level shift the latest history ``z`` shows, or None when it shows none.
    ``min_history``: steps the model needs before it forecasts."""
    if z.size < min_history + SHIFT_STEPS or "p05" not in offsets or "p95" not in offsets:
        return None
    longest = min(day, z.size - min_history)
    low, high = _band(offsets, "p05", longest), _band(offsets, "p95", longest)
    found, misses, before_found = 0, np.zeros(0), np.zeros(0)
    for n in range(SHIFT_STEPS, longest + 1):
        before = fitted.predict(z[:-n], n, steps_since_fit - n)
        run = z[-n:] - before
        side = _beyond(run, low, high)
        if side == 0 or (found and side != int(np.sign(misses[0]))):
            break
        found, misses, before_found = n, run, before
    if not found or not _beyond_noise(misses, offsets):
        return None
    expected = float(from_model_space(before_found).sum())
    actual = float(from_model_space(z[-found:]).sum())
    factor = actual / expected if expected > 0 else MAX_FACTOR
    return Shift(found, float(np.median(misses)), float(np.clip(factor, 1 / MAX_FACTOR, MAX_FACTOR)))


def shifted_forecast(
    fitted: Fitted, z: Array, horizon: int, shift: Shift, *, steps_since_fit: int = 0
) -> Array:
    """The forecast (sqrt space, ``horizon`` steps) after ``shift``: the model's forecast from
    before the move, continued, plus the median miss since the move."""
    n = shift.steps_ago
    continued = fitted.predict(z[:-n], n + horizon, steps_since_fit - n)[n:]
    return np.asarray(continued + shift.miss, dtype=float)

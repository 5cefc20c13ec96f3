"""The state service's default demand history (streams/fold.DEFAULT_HISTORY_STEPS) is long enough
for the forecaster to learn a weekly pattern: a service quiet at weekends is forecast busy again on
Monday from three weeks of history, where a one-week window (the default until it was raised) can
only score daily models and forecasts Monday like Sunday."""

from __future__ import annotations

import numpy as np
from forecaster_synthetic import daily_curve

from forecaster.auto import fit_service, predict_quantiles
from streams.fold import DEFAULT_HISTORY_STEPS

STEP_S = 900
PER_DAY = 86_400 // STEP_S


def _office_week(days: int, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """``days`` of 15-minute busy GPUs starting on a Monday (weekends at 30%), then the next day
    without noise: the history and the truth it is forecast against."""
    steps = np.arange((days + 1) * PER_DAY)
    hours = steps * STEP_S / 3600.0
    weekend = np.where((steps // PER_DAY) % 7 >= 5, 0.3, 1.0)
    truth = 4.0 * daily_curve(hours) * weekend
    noisy = truth * (1.0 + np.random.default_rng(seed).normal(0, 0.05, steps.size))
    return np.maximum(noisy[: days * PER_DAY], 0.0), truth[days * PER_DAY :]


def _monday_miss(history: np.ndarray, monday: np.ndarray) -> float:
    model = fit_service(history, step_s=STEP_S, horizon_steps=PER_DAY)
    p50 = np.asarray(predict_quantiles(model, history, PER_DAY)["p50"])
    return float(np.abs(p50 - monday).mean() / monday.mean())


def test_three_weeks_of_history_forecast_monday_after_a_quiet_weekend() -> None:
    history, monday = _office_week(DEFAULT_HISTORY_STEPS // PER_DAY)  # ends on a Sunday
    assert DEFAULT_HISTORY_STEPS // PER_DAY % 7 == 0
    default_miss = _monday_miss(history, monday)
    week_miss = _monday_miss(history[-7 * PER_DAY :], monday)
    assert week_miss > 0.4  # one week: Monday forecast from Sunday, at weekend level
    assert default_miss < 0.15

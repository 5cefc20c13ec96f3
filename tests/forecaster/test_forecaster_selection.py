"""Selection needs MIN_SCORED_ORIGINS scored origins, bands from so few origins are calibrated
leave-one-out (not widened by a guess), and MSTL's weekly profile survives an outlier day (a
launch ramp, a holiday): the robust decomposition down-weights it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from forecaster_synthetic import daily_curve, synthetic_hourly

from forecaster.auto import fit_service
from forecaster.models import Mstl, SeasonalNaive, _FittedMstl, from_model_space, to_model_space
from forecaster.selection import MIN_SCORED_ORIGINS, InnerBacktest, calibrate, choose, judged_rows


def _inner(predictions: dict[str, np.ndarray], actual: np.ndarray) -> InnerBacktest:
    """An inner backtest of given forecast rows (every fit a seasonal naive: only rows are read)."""
    fits = {name: SeasonalNaive().fit(actual.ravel(), 24) for name in predictions}
    origins = np.arange(actual.shape[0], dtype=np.int64) * 24
    full_from = dict.fromkeys(predictions, 0)
    return InnerBacktest(
        origins=origins, actual_z=actual, predictions=predictions, fits=fits, full_from=full_from
    )


def test_a_model_scored_on_too_few_origins_is_not_chosen() -> None:
    """A candidate exact on the last origins (it needs a longer history: NaN before) beside one a
    little better than seasonal naive on all fourteen: on MIN_SCORED_ORIGINS - 1 origins the
    steady one is chosen, on MIN_SCORED_ORIGINS the exact one."""
    rng = np.random.default_rng(3)
    actual = 2.0 + rng.uniform(0, 1, (14, 24))
    naive = actual + rng.normal(0, 0.4, actual.shape)
    steady = actual + rng.normal(0, 0.3, actual.shape)
    for scored, expected in ((MIN_SCORED_ORIGINS - 1, "steady"), (MIN_SCORED_ORIGINS, "late")):
        late = np.full(actual.shape, np.nan)
        late[-scored:] = actual[-scored:]
        predictions = {SeasonalNaive.name: naive, "steady": steady, "late": late}
        assert choose(_inner(predictions, actual)) == expected


@pytest.mark.parametrize("scored", [MIN_SCORED_ORIGINS, MIN_SCORED_ORIGINS + 1])
def test_bands_from_three_or_four_origins_are_calibrated_leave_one_out(scored: int) -> None:
    """Too few origins for a replay in time order: each origin is tested on the bands from the
    others, so the band scale is fitted to the residuals (replayed 90% coverage reported) instead
    of a 1.5x guess."""
    rng = np.random.default_rng(4)
    actual = 2.0 + rng.uniform(0, 1, (14, 24))
    late = np.full(actual.shape, np.nan)
    late[-scored:] = actual[-scored:] + rng.normal(0, 0.3, (scored, 24))
    inner = _inner({SeasonalNaive.name: actual + 0.5, "late": late}, actual)
    calibrated = calibrate(inner, "late", 24)
    assert not any("widened" in note for note in calibrated.notes)
    assert calibrated.coverage_90 is not None and 0.85 <= calibrated.coverage_90 <= 0.95
    assert np.all(calibrated.offsets["p05"] < 0) and np.all(calibrated.offsets["p95"] > 0)


def test_mstl_is_chosen_once_it_can_be_calibrated_on_a_weekly_series() -> None:
    """MSTL needs 15 days to be a candidate: from 21 days of history it is scored on all fourteen
    inner origins (daily season alone before the fifteenth day) and, on a series with a weekly
    pattern, chosen and calibrated on the six where it fitted both seasons."""
    fitted = fit_service(
        synthetic_hourly(21, seed=5).tolist(), step_s=3600, horizon_steps=24, keep_inner=True
    )
    assert fitted.inner is not None
    assert int((~np.isnan(fitted.inner.predictions[Mstl.name][:, 0])).sum()) == 14
    assert int((~np.isnan(judged_rows(fitted.inner, Mstl.name)[:, 0])).sum()) == 6
    assert fitted.calibrated.model == Mstl.name
    assert not any("widened" in note for note in fitted.calibrated.notes)


def test_mstl_under_two_weeks_fits_the_daily_season_alone() -> None:
    """Ten days: no weekly profile, the daily one recovers the known curve; at 16 days the inner
    backtest scores MSTL from its third day (13 of 14 origins), not from one origin."""
    z = to_model_space(synthetic_hourly(10, noise=0.05, seed=2))
    fitted = Mstl().fit(z, 24)
    assert isinstance(fitted, _FittedMstl)
    assert np.all(fitted.weekly_profile == 0.0)
    predicted = from_model_space(fitted.predict(z, 24))
    expected = daily_curve(np.arange(10 * 24, 11 * 24))
    assert np.mean(np.abs(predicted - expected)) < 0.1 * float(np.mean(expected))
    inner = fit_service(
        synthetic_hourly(16, seed=5).tolist(), step_s=3600, horizon_steps=24, keep_inner=True
    ).inner
    assert inner is not None
    assert int((~np.isnan(inner.predictions[Mstl.name][:, 0])).sum()) == 13
    # one origin with both seasons is too few to judge on: it is chosen and calibrated on all 13
    assert int((~np.isnan(judged_rows(inner, Mstl.name)[:, 0])).sum()) == 13


def test_bands_come_from_the_origins_fitted_as_the_model_is_now() -> None:
    """A model whose early origins (before it could fit every season) missed by 1.5 and whose
    last four missed by at most 0.1: its 90% band is calibrated from the last four, not widened
    by the early misses."""
    rng = np.random.default_rng(6)
    actual = 2.0 + rng.uniform(0, 1, (14, 24))
    model = actual + rng.uniform(-0.1, 0.1, actual.shape)
    model[:10] += 1.5 * rng.choice([-1.0, 1.0], (10, 1))
    inner = _inner({SeasonalNaive.name: actual + 0.5, "model": model}, actual)
    full = replace(inner, full_from={SeasonalNaive.name: 0, "model": int(inner.origins[10])})
    narrow, wide = calibrate(full, "model", 24), calibrate(inner, "model", 24)
    assert float(np.max(narrow.offsets["p95"])) < 0.2 < float(np.max(wide.offsets["p95"]))


def test_mstl_weekly_profile_survives_a_day_at_a_tenth_of_its_level() -> None:
    """Three weeks of a daily curve with a quiet weekday; 14 days before the forecast day the
    same weekday ran at a tenth of its level (a holiday). The forecast of that weekday stays
    near the true curve instead of carrying part of the holiday into the weekly profile."""
    days = 21
    rng = np.random.default_rng(11)
    hours = np.arange((days + 1) * 24)
    truth = daily_curve(hours) * np.where((hours // 24) % 7 == 3, 0.7, 1.0)
    history = np.maximum(truth[: days * 24] + rng.normal(0, 0.15, days * 24), 0.0)
    holiday = slice((days - 14) * 24, (days - 13) * 24)
    history[holiday] = history[holiday] * 0.1
    z = to_model_space(history)
    predicted = from_model_space(Mstl().fit(z, 24).predict(z, 24))
    expected = truth[days * 24 :]
    assert np.mean(np.abs(predicted - expected)) < 0.1 * float(np.mean(expected))

"""Quantile curves are monotone in the level and never negative, whatever the history."""

from __future__ import annotations

import numpy as np
from forecaster_synthetic import T0, daily_curve, synthetic_hourly
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forecaster import forecast
from schemas import DemandForecast
from schemas.forecast import quantile_level


def _check(result: DemandForecast, horizon_steps: int) -> None:
    keys = sorted(result.quantiles, key=quantile_level)
    assert {"p50", "p90", "p99"} <= set(keys)
    curves = np.array([result.quantiles[k] for k in keys])
    assert curves.shape == (len(keys), horizon_steps)
    assert np.all(np.isfinite(curves))
    assert np.all(curves >= 0.0)
    assert np.all(np.diff(curves, axis=0) >= -1e-9)


_values = st.one_of(
    st.just(0.0),
    st.floats(min_value=0.0, max_value=500.0, allow_nan=False),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=st.lists(_values, min_size=1, max_size=24 * 8), horizon=st.integers(1, 30))
def test_random_histories_give_monotone_non_negative_quantiles(history: list[float], horizon: int) -> None:
    result = forecast(history, cluster="c", service="s", step_s=3600, horizon_steps=horizon, issued_at=T0)
    _check(result, horizon)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    zero_share=st.floats(0.0, 0.9),
    burst=st.floats(1.0, 50.0),
)
def test_random_seasonal_histories_with_zeros_and_bursts(seed: int, zero_share: float, burst: float) -> None:
    """Long enough for the full selection (inner backtest, every candidate): still monotone, >= 0."""
    rng = np.random.default_rng(seed)
    values = synthetic_hourly(17, noise=0.5, seed=seed)
    values[rng.random(values.size) < zero_share] = 0.0
    values[rng.integers(0, values.size, 5)] *= burst
    result = forecast(values.tolist(), cluster="c", service="s", step_s=3600, horizon_steps=24, issued_at=T0)
    _check(result, 24)


def test_sub_hourly_steps_are_forecast_at_the_step_size() -> None:
    hourly = synthetic_hourly(16)
    quarter_hourly = np.repeat(hourly, 4)  # 15-min steps: daily season 96, weekly 672
    result = forecast(
        quarter_hourly.tolist(), cluster="c", service="s", step_s=900, horizon_steps=96, issued_at=T0
    )
    _check(result, 96)
    assert result.step_s == 900
    assert result.degraded_reason is None


def test_the_first_sub_hourly_steps_follow_the_curve_from_the_last_observed_hour() -> None:
    """A noise-free daily curve at 15-minute steps, forecast at 08:00 on its morning rise (7 GPUs
    an hour): the current step is forecast within 0.5 GPUs of the truth and rises into the next,
    instead of holding the first forecast hour's mean for half an hour (2.6 GPUs off)."""
    step_s, per_day, end = 900, 96, 10 * 96 + 32
    values = 4.0 * daily_curve(np.arange(end + 4) * step_s / 3600.0)
    history, truth = values[:end], values[end:]
    result = forecast(
        history.tolist(), cluster="c", service="s", step_s=step_s, horizon_steps=per_day, issued_at=T0
    )
    p50 = result.quantiles["p50"]
    assert abs(p50[0] - truth[0]) < 0.5 < abs(float(truth.mean()) - truth[0])
    assert p50[0] < p50[1] < p50[2]

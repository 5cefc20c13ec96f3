"""The seasonal models recover a known daily curve; short or gappy history degrades and says so."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from forecaster_synthetic import T0, daily_curve, synthetic_hourly

from forecaster import forecast
from forecaster.models import HoltWinters, Mstl, from_model_space, to_model_space
from simulator.demand import traces_dir

TRACES = traces_dir()


@pytest.mark.parametrize("model", [HoltWinters(), Mstl()], ids=lambda m: m.name)
def test_seasonal_model_recovers_a_known_daily_curve(model: HoltWinters | Mstl) -> None:
    days = 21
    rng = np.random.default_rng(7)
    truth = daily_curve(np.arange(days * 24 + 24))
    history = np.maximum(truth[: days * 24] + rng.normal(0, 0.15, days * 24), 0)
    z = to_model_space(history)
    predicted = from_model_space(model.fit(z, 24).predict(z, 24))
    expected = truth[days * 24 :]
    assert np.mean(np.abs(predicted - expected)) < 0.25 * np.mean(np.abs(expected - expected.mean()))
    assert np.argmax(predicted) == pytest.approx(np.argmax(expected), abs=1)


def test_auto_forecast_tracks_the_daily_curve_and_its_band_covers_it() -> None:
    days = 21
    history = synthetic_hourly(days, noise=0.3, seed=3)
    result = forecast(history.tolist(), cluster="c", service="s", step_s=3600, horizon_steps=24, issued_at=T0)
    hours = np.arange(days * 24, days * 24 + 24)
    truth = daily_curve(hours) * np.where((hours // 24) % 7 == 5, 0.7, 1.0)
    p50 = np.array(result.quantiles["p50"])
    assert np.mean(np.abs(p50 - truth)) < 0.6
    assert result.model != "persistence"
    assert result.backtest_rel_mae is not None


def test_short_history_falls_back_with_a_reason() -> None:
    result = forecast(
        [1.0, 2.0, 3.0] * 4, cluster="c", service="s", step_s=3600, horizon_steps=24, issued_at=T0
    )
    assert result.model == "persistence"
    assert result.degraded_reason is not None and "too short" in result.degraded_reason
    four_days = synthetic_hourly(4).tolist()
    seasonal = forecast(four_days, cluster="c", service="s", step_s=3600, horizon_steps=24, issued_at=T0)
    assert seasonal.model == "seasonal-naive"
    assert seasonal.degraded_reason is not None


def test_gappy_history_is_repaired_and_says_so() -> None:
    history = synthetic_hourly(18)
    history[100:102] = np.nan
    history[200] = -3.0
    result = forecast(history.tolist(), cluster="c", service="s", step_s=3600, horizon_steps=24, issued_at=T0)
    assert result.degraded_reason is not None
    assert "missing" in result.degraded_reason


def test_ten_minute_qps_trace_takes_the_sub_hourly_path() -> None:
    path = TRACES / "alibaba_gentd26_qps_10min.csv"
    if not path.is_file():
        pytest.skip(f"trace not present: {path}")
    frame = pd.read_csv(path)
    qps = frame[frame.request_type == "Generative Requests"].sort_values("minutes_from_start")
    values = qps.mean_qps_summed_over_containers.to_numpy(dtype=float)
    result = forecast(values.tolist(), cluster="c", service="s", step_s=600, horizon_steps=144, issued_at=T0)
    assert len(result.quantiles["p50"]) == 144
    assert result.degraded_reason is not None  # a single day: no backtest possible

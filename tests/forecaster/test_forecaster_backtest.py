"""The outer backtest never lets the future into a fit or a calibration, and scores sensibly."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from forecaster_synthetic import synthetic_hourly
from typer.testing import CliRunner

from ebbtide.cli_forecast import _plot_axis, app
from forecaster.backtest import AUTO, backtest_origins, rolling_origin_backtest, weighted_interval_score


def test_origins_are_daily_and_leave_a_full_day_to_score() -> None:
    origins = backtest_origins(554, 3600, 24, 14)
    assert origins[0] == 14 * 24
    assert np.all(np.diff(origins) == 24)
    assert origins[-1] + 24 <= 554 < origins[-1] + 48


def test_changing_the_future_changes_no_forecast_made_before_it() -> None:
    values = synthetic_hourly(12, seed=5)
    kwargs = {"step_s": 3600, "min_history_days": 9, "max_origins": 4}
    base = rolling_origin_backtest(values, **kwargs)
    cut = base.origins[1]
    tampered = values.copy()
    tampered[cut:] = tampered[cut:] * 10 + 50  # a different future from the second origin on
    other = rolling_origin_backtest(tampered, **kwargs)
    assert base.origins == other.origins
    for model, by_origin in base.forecasts.items():
        for origin, curves in by_origin.items():
            for key, curve in curves.items():
                same = np.array_equal(curve, other.forecasts[model][origin][key])
                assert same == (origin < cut) or origin >= cut, (model, origin, key)
    later = base.origins[2]
    assert not np.array_equal(base.forecasts[AUTO][later]["p50"], other.forecasts[AUTO][later]["p50"])


def test_a_window_hides_the_history_before_it() -> None:
    """With ``window_days`` each fit sees only that much: changing the past before every origin's
    window changes nothing, and without the window it changes the forecasts."""
    values = synthetic_hourly(12, seed=5)
    kwargs = {"step_s": 3600, "min_history_days": 9, "max_origins": 4, "score_candidates": False}
    base = rolling_origin_backtest(values, window_days=7, **kwargs)
    older = values.copy()
    older[: 2 * 24] = older[: 2 * 24] * 3 + 7  # before the first origin's 7-day window (day 9)
    windowed = rolling_origin_backtest(older, window_days=7, **kwargs)
    whole = rolling_origin_backtest(older, **kwargs)
    first = base.origins[0]

    def same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
        return all(np.array_equal(a[key], b[key]) for key in a)

    assert same(base.forecasts[AUTO][first], windowed.forecasts[AUTO][first])
    assert not same(base.forecasts[AUTO][first], whole.forecasts[AUTO][first])
    with pytest.raises(ValueError, match="window_days"):
        rolling_origin_backtest(values, window_days=0.5, **kwargs)


def test_seasonal_naive_scores_exactly_one_relative_to_itself() -> None:
    result = rolling_origin_backtest(
        synthetic_hourly(12, seed=2), step_s=3600, min_history_days=9, max_origins=4
    )
    naive = result.score("seasonal-naive")
    assert naive is not None and naive.rel_mae == pytest.approx(1.0)
    auto = result.score(AUTO)
    assert auto is not None and 0.0 <= auto.coverage_80 <= auto.coverage_90 <= 1.0
    assert auto.wis > 0 and len(auto.mae_by_horizon) == 24
    assert auto.mae == pytest.approx(float(np.mean(auto.mae_by_horizon)))


def test_every_model_is_scored_on_the_same_origins() -> None:
    # MSTL needs 15 days to be a candidate, so the first origins have no MSTL forecast
    result = rolling_origin_backtest(
        synthetic_hourly(18, seed=5), step_s=3600, min_history_days=9, max_origins=4
    )
    common = result.common_origins()
    assert 0 < len(common) < len(result.origins)
    scores = [result.score(name) for name in result.model_names()]
    assert all(s is not None and s.origins == len(common) for s in scores)


def test_wis_of_a_point_forecast_is_half_the_absolute_error_over_the_intervals() -> None:
    actual = np.array([3.0, 5.0])
    point = {k: np.array([4.0, 4.0]) for k in ("p01", "p05", "p10", "p50", "p90", "p95", "p99")}
    # every interval has width 0 and misses by 1: alpha/2 * (2/alpha) * 1 = 1 each, plus 0.5 * 1
    assert weighted_interval_score(actual, point) == pytest.approx((0.5 + 3 * 1.0) / 3.5)


def test_cli_backtest_writes_table_png_and_json(tmp_path: Path) -> None:
    values = synthetic_hourly(12, seed=4)
    hours = np.datetime64("2026-01-05T00:00") + np.arange(values.size).astype("timedelta64[h]")
    csv = tmp_path / "demand.csv"
    rows = [f"{h},{v * 3600:.3f}" for h, v in zip(hours.astype(str), values, strict=True)]
    csv.write_text("when,gpu_s\n" + "\n".join(rows) + "\n")
    out_json, out_png = tmp_path / "bt.json", tmp_path / "bt.png"
    result = CliRunner(env={"COLUMNS": "200"}).invoke(
        app,
        [
            "backtest",
            str(csv),
            "--time-column",
            "when",
            "--value-column",
            "gpu_s",
            "--scale",
            str(1 / 3600),
            "--min-history-days",
            "9",
            "--max-origins",
            "4",
            "--json",
            str(out_json),
            "--png",
            str(out_png),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "rel MAE" in result.output
    entry = json.loads(out_json.read_text())["series"]["demand"]
    assert set(entry) == {
        "model",
        "origins",
        "window_days",
        "rel_mae",
        "mae",
        "mae_by_horizon",
        "wis",
        "pinball",
        "coverage_90",
        "coverage_80",
        "selected_per_origin",
        "candidates",
        "forecast_ms_p99",
        "fit_ms_p50",
    }
    assert entry["model"] == "auto" and len(entry["selected_per_origin"]) == entry["origins"]
    assert len(entry["mae_by_horizon"]) == 24 and "seasonal-naive" in entry["candidates"]
    assert entry["candidates"]["seasonal-naive"]["rel_mae"] == pytest.approx(1.0)
    assert entry["fit_ms_p50"] > 0
    assert out_png.stat().st_size > 10_000
    assert f"wrote {out_png}" in result.output.replace("\n", "")


def test_the_plot_axis_is_in_utc_dates_or_hours_for_relative_times() -> None:
    values = synthetic_hourly(10, seed=1)
    result = rolling_origin_backtest(values, step_s=3600, min_history_days=9, max_origins=2)
    stamps, label = _plot_axis(result, start_s=1_767_571_200.0)  # 2026-01-05 00:00 UTC
    assert label.startswith("date (UTC)") and stamps[0] == np.datetime64("2026-01-05T00:00:00")
    assert stamps[25] == np.datetime64("2026-01-06T01:00:00")
    hours, label = _plot_axis(result, start_s=0.0)
    assert label.startswith("hours") and hours[25] == pytest.approx(25.0)


def test_cli_backtest_plots_in_the_given_unit(tmp_path: Path) -> None:
    values = synthetic_hourly(10, seed=3)
    csv = tmp_path / "rph.csv"
    csv.write_text("t,n\n" + "\n".join(f"{i * 3600},{v:.3f}" for i, v in enumerate(values)) + "\n")
    out_png = tmp_path / "rph.png"
    args = ["backtest", str(csv), "--time-column", "t", "--value-column", "n", "--scale", "1"]
    args += ["--unit", "requests per hour", "--min-history-days", "9", "--max-origins", "2"]
    args += ["--png", str(out_png)]
    result = CliRunner(env={"COLUMNS": "200"}).invoke(app, args)
    assert result.exit_code == 0, result.output
    assert out_png.stat().st_size > 10_000


def test_cli_rejects_a_missing_column(tmp_path: Path) -> None:
    csv = tmp_path / "demand.csv"
    csv.write_text("t,v\n0,1\n3600,2\n")
    result = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["backtest", str(csv), "--time-column", "hour"])
    assert result.exit_code != 0
    assert "--time-column" in result.output

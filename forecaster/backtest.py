"""Outer rolling-origin backtest of the forecaster over a whole demand series. Pure (the caller
injects a timer; the CLI `ebbtide forecast backtest` prints, plots and writes JSON).

One origin a day from ``min_history_days`` on; at each origin everything (cleaning, selection,
fit, calibration) sees ``values[:origin]`` only, and forecasts the next 24 hours. Every model (the
automatic choice ``auto`` and each candidate forced) is scored on one origin set, the origins all
of them forecast from: MAE relative to the 24-hour seasonal naive forecast from the same origins,
MAE by step ahead, mean pinball loss over the quantile levels, the weighted interval score (WIS)
of the quantiles, coverage of the 80% (p10-p90) and 90% (p05-p95) bands.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from forecaster.auto import DAY_S, fit_service, predict_quantiles, with_model
from forecaster.clean import History
from forecaster.models import Array, default_models
from forecaster.selection import ENSEMBLE_NAME, QUANTILE_LEVELS

AUTO = "auto"


@dataclass(frozen=True)
class ModelScore:
    model: str
    origins: int
    rel_mae: float
    mae: float
    pinball: float
    wis: float  # weighted interval score of the quantiles (busy GPUs; lower is better)
    coverage_80: float
    coverage_90: float
    mae_by_horizon: list[float]  # MAE at each step ahead (busy GPUs), over the scored origins


INTERVALS: tuple[tuple[float, str, str], ...] = (
    (0.02, "p01", "p99"),
    (0.10, "p05", "p95"),
    (0.20, "p10", "p90"),
)
"""Central intervals (alpha, lower, upper) of the quantile keys, for the weighted interval score."""


def weighted_interval_score(actual: Array, curves: dict[str, Array]) -> float:
    """WIS (Bracher et al. 2021) of the median and the central intervals, mean over the points:
    (|y - m| / 2 + sum over intervals of alpha/2 x interval score) / (intervals + 1/2)."""
    total = 0.5 * np.abs(actual - curves["p50"])
    for alpha, lo, hi in INTERVALS:
        low, high = curves[lo], curves[hi]
        interval = (
            (high - low)
            + (2 / alpha) * np.maximum(low - actual, 0)
            + (2 / alpha) * np.maximum(actual - high, 0)
        )
        total = total + alpha / 2 * interval
    return float(np.mean(total / (len(INTERVALS) + 0.5)))


@dataclass
class BacktestResult:
    step_s: int
    horizon_steps: int
    values: Array
    window_days: float | None = None  # each forecast saw only this much history (None: the whole past)
    origins: list[int] = field(default_factory=list)
    forecasts: dict[str, dict[int, dict[str, Array]]] = field(default_factory=dict)  # model -> origin -> q
    selected: list[str] = field(default_factory=list)
    fit_ms: list[float] = field(default_factory=list)
    forecast_ms: list[float] = field(default_factory=list)

    def naive(self, origin: int) -> Array:
        day = DAY_S // self.step_s
        return np.array([self.values[origin - day + (h % day)] for h in range(self.horizon_steps)])

    def actual(self, origin: int) -> Array:
        return self.values[origin : origin + self.horizon_steps]

    def common_origins(self) -> list[int]:
        """The origins every model forecast from: one origin set scores them all (a model that
        needs a longer history than the first origins leaves those out for every model)."""
        sets = [set(by_origin) for by_origin in self.forecasts.values() if by_origin]
        return sorted(set.intersection(*sets)) if sets else []

    def score(self, model: str, origins: list[int] | None = None) -> ModelScore | None:
        """Model's scores over ``origins`` (default: the common origins)."""
        by_origin = self.forecasts.get(model, {})
        origins = self.common_origins() if origins is None else origins
        if not origins or any(o not in by_origin for o in origins):
            return None
        actual_rows = np.vstack([self.actual(o) for o in origins])
        naive = np.concatenate([self.naive(o) for o in origins])
        curves = {k: np.concatenate([by_origin[o][k] for o in origins]) for k in QUANTILE_LEVELS}
        actual = actual_rows.ravel()
        errors = np.abs(curves["p50"] - actual)
        mae = float(np.mean(errors))
        floor = float(np.mean(np.abs(naive - actual)))
        pinball = float(
            np.mean(
                [
                    np.mean(np.maximum(level * (actual - curves[k]), (level - 1) * (actual - curves[k])))
                    for k, level in QUANTILE_LEVELS.items()
                ]
            )
        )

        def covered(lo: str, hi: str) -> float:
            return float(np.mean((actual >= curves[lo] - 1e-9) & (actual <= curves[hi] + 1e-9)))

        return ModelScore(
            model=model,
            origins=len(origins),
            rel_mae=mae / floor if floor > 0 else float("nan"),
            mae=mae,
            pinball=pinball,
            wis=weighted_interval_score(actual, curves),
            coverage_80=covered("p10", "p90"),
            coverage_90=covered("p05", "p95"),
            mae_by_horizon=errors.reshape(actual_rows.shape).mean(axis=0).tolist(),
        )

    def model_names(self) -> list[str]:
        return list(self.forecasts)


def backtest_origins(n_values: int, step_s: int, horizon_steps: int, min_history_days: float) -> list[int]:
    day = DAY_S // step_s
    first = max(round(min_history_days * day), day)
    return list(range(first, n_values - horizon_steps + 1, day))


def rolling_origin_backtest(
    values: History,
    *,
    step_s: int,
    min_history_days: float = 7.0,
    max_origins: int = 14,
    window_days: float | None = None,
    score_candidates: bool = True,
    timer: Callable[[], float] | None = None,
    on_origin: Callable[[int, int], None] | None = None,
) -> BacktestResult:
    """24-hour-ahead forecasts from one origin a day; ``window_days``: each forecast sees only the
    last that many days before its origin (what a state service keeping that much history hands the
    forecaster), else the whole past; ``timer`` (seconds, e.g. time.perf_counter) makes it record
    fit and step-time forecast durations; ``on_origin(done, total)`` reports progress."""
    if DAY_S % step_s != 0:
        raise ValueError(f"step_s: {step_s} s does not divide a day; a 24-hour backtest needs it to")
    if window_days is not None and window_days < 1:
        raise ValueError(f"window_days: {window_days} is under a day; a daily season needs one")
    series = np.asarray(values, dtype=float)
    horizon = DAY_S // step_s
    result = BacktestResult(step_s=step_s, horizon_steps=horizon, values=series, window_days=window_days)
    window = series.size if window_days is None else round(window_days * DAY_S / step_s)
    origins = backtest_origins(series.size, step_s, horizon, min_history_days)
    names = [AUTO] + ([m.name for m in default_models()] + [ENSEMBLE_NAME] if score_candidates else [])
    result.forecasts = {name: {} for name in names}
    clock = timer or (lambda: 0.0)
    for done, origin in enumerate(origins):
        history = series[max(origin - window, 0) : origin]
        t0 = clock()
        fitted = fit_service(
            history,
            step_s=step_s,
            horizon_steps=horizon,
            max_origins=max_origins,
            keep_inner=score_candidates,
        )
        t1 = clock()
        auto = predict_quantiles(fitted, history, horizon)
        t2 = clock()
        result.origins.append(origin)
        result.selected.append(fitted.calibrated.model)
        result.fit_ms.append((t1 - t0) * 1000)
        result.forecast_ms.append((t2 - t1) * 1000)
        result.forecasts[AUTO][origin] = {k: np.asarray(v) for k, v in auto.items()}
        for name in names[1:]:
            forced = with_model(fitted, name)
            if forced is not None:
                curves = predict_quantiles(forced, history, horizon)
                result.forecasts[name][origin] = {k: np.asarray(v) for k, v in curves.items()}
        if on_origin is not None:
            on_origin(done + 1, len(origins))
    result.forecasts = {k: v for k, v in result.forecasts.items() if v}
    return result

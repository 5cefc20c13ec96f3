"""Demand forecasting: pure functions from a service's demand history to a DemandForecast.

Place in the loop: each step the ForecastSource turns every service's demand_history (busy GPUs
per step, oldest first) into a 24-hour DemandForecast (p01..p99 curves, monotone in the level,
never negative) that the optimizer plans against. No I/O, no clock reads, no threads here.

Stable interface:
- ``forecast(history, *, cluster, service, step_s, horizon_steps, issued_at) -> DemandForecast``
  (forecaster.auto): clean, select by inner rolling-origin backtest, fit, calibrate, forecast.
- ``ForecastBank`` (forecaster.bank): per-service fitted models.
  ``bank.forecast(service, history, *, cluster, step_s, horizon_steps, issued_at)`` reuses the
  fitted model (cheap); ``bank.refit_due(service, now[, step_s])`` says when the cadence or drift
  calls for ``bank.refit(service, history, *, step_s, horizon_steps, fitted_at)``, which a service
  may run in a background thread.
- ``BankForecastSource`` (forecaster.source): the loop's ForecastSource,
  ``forecasts(state, now) -> dict[service, DemandForecast]``.
- ``rolling_origin_backtest`` (forecaster.backtest): the outer backtest behind
  ``ebbtide forecast backtest``.
- ``seasonal_naive`` (forecaster.naive): the floor and last-resort fallback.
- ``clean_values`` / ``clean_series`` / ``HistoryError`` (forecaster.clean): the input gate.
"""

from forecaster.auto import fit_service, forecast, predict_quantiles
from forecaster.bank import BankConfig, ForecastBank
from forecaster.clean import HistoryError, clean_series, clean_values
from forecaster.naive import seasonal_naive
from forecaster.source import BankForecastSource

__all__ = [
    "BankConfig",
    "BankForecastSource",
    "ForecastBank",
    "HistoryError",
    "clean_series",
    "clean_values",
    "fit_service",
    "forecast",
    "predict_quantiles",
    "seasonal_naive",
]

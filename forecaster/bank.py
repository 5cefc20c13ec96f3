"""ForecastBank: per-service fitted models kept between loop steps. Cheap every step, refit on a
cadence or on drift. Pure and single-threaded: it reads no clock (times come in as arguments) and
starts no threads; a service may call ``refit`` from a background thread of its own (the bank
swaps the new model in with one dict assignment).

Per service the bank keeps the ServiceModel from ``fit_service`` and when it was fitted. Every
``forecast`` call reuses it (``predict_quantiles`` on the latest history, a few ms). A refit is
due when the model is older than ``refit_every_s``, or when the actuals fell outside the last
forecast's p05-p95 band for ``drift_steps`` steps in a row, or when the step size changed, or
when the last forecast followed a level shift: the refit absorbs it (forecaster/level_moves.py),
and from then on every fit and forecast of the service reads its history with the recorded moves.
A service seen for the first time is fitted inline (``fit_missing_inline``), or, when that is off,
gets a seasonal-naive forecast marked degraded until its first refit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from forecaster.auto import (
    DEFAULT_MAX_ORIGINS,
    ServiceModel,
    fit_service,
    predict_following_shifts,
    to_event,
)
from forecaster.clean import History, HistoryError, clean_values
from forecaster.level_moves import LevelMove, absorbed, level_move, still_in
from forecaster.naive import seasonal_naive
from schemas import DemandForecast


def _as_float(value: object) -> float:
    """A history value as a number; NaN where it is none (clean_values names the problem)."""
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


@dataclass(frozen=True)
class BankConfig:
    refit_every_s: int = 6 * 3600
    drift_steps: int = 3  # consecutive steps outside the p05-p95 band that force a refit
    fit_missing_inline: bool = True
    max_origins: int = DEFAULT_MAX_ORIGINS

    def __post_init__(self) -> None:
        if self.refit_every_s <= 0:
            raise ValueError(f"refit_every_s: must be positive, got {self.refit_every_s}")
        if self.drift_steps <= 0:
            raise ValueError(f"drift_steps: must be positive, got {self.drift_steps}")


@dataclass
class _ServiceSlot:
    model: ServiceModel
    fitted_at: datetime
    horizon_steps: int
    last_issued_at: datetime | None = None
    last_band: tuple[list[float], list[float]] | None = None  # p05, p95 of the last forecast
    misses_in_a_row: int = 0
    drift: bool = False
    followed: LevelMove | None = None  # the level shift the last forecast followed, to absorb


@dataclass
class ForecastBank:
    config: BankConfig = field(default_factory=BankConfig)
    _slots: dict[str, _ServiceSlot] = field(default_factory=dict)
    _moves: dict[str, list[LevelMove]] = field(default_factory=dict)

    def refit(
        self,
        service: str,
        history: History,
        *,
        step_s: int,
        horizon_steps: int,
        fitted_at: datetime,
    ) -> ServiceModel:
        """Select, fit and calibrate ``service`` on ``history`` (ending at ``fitted_at``) now,
        absorbing the level shifts followed so far (forecaster/level_moves.py)."""
        old = self._slots.get(service)
        moves = self._moves.get(service, []) + ([old.followed] if old and old.followed else [])
        moves = still_in(moves, len(history), step_s=step_s, now=fitted_at)
        self._moves[service] = moves
        model = fit_service(
            absorbed(history, moves, step_s=step_s, now=fitted_at),
            step_s=step_s,
            horizon_steps=horizon_steps,
            max_origins=self.config.max_origins,
        )
        self._slots[service] = _ServiceSlot(model=model, fitted_at=fitted_at, horizon_steps=horizon_steps)
        return model

    def keep_only(self, services: set[str]) -> None:
        """Forget the models of services not in ``services`` (gone from the cluster)."""
        for name in set(self._slots) - services:
            del self._slots[name]
            self._moves.pop(name, None)

    def refit_due(self, service: str, now: datetime, step_s: int | None = None) -> bool:
        slot = self._slots.get(service)
        if slot is None:
            return True
        if step_s is not None and step_s != slot.model.step_s:
            return True
        if slot.drift or slot.followed is not None:
            return True
        return (now - slot.fitted_at).total_seconds() >= self.config.refit_every_s

    def services_due(self, now: datetime) -> list[str]:
        return [name for name in self._slots if self.refit_due(name, now)]

    def model(self, service: str) -> ServiceModel | None:
        slot = self._slots.get(service)
        return slot.model if slot else None

    def _track_drift(self, slot: _ServiceSlot, history: History, issued_at: datetime) -> None:
        if slot.last_band is None or slot.last_issued_at is None:
            return
        new_steps = round((issued_at - slot.last_issued_at).total_seconds() / slot.model.step_s)
        lo, hi = slot.last_band
        new_steps = min(new_steps, len(history), len(lo))
        for step in range(new_steps):
            actual = _as_float(history[len(history) - new_steps + step])
            missed = not math.isfinite(actual) or not (lo[step] - 1e-9 <= actual <= hi[step] + 1e-9)
            slot.misses_in_a_row = slot.misses_in_a_row + 1 if missed else 0
            if slot.misses_in_a_row >= self.config.drift_steps:
                slot.drift = True

    def forecast(
        self,
        service: str,
        history: History,
        *,
        cluster: str,
        step_s: int,
        horizon_steps: int,
        issued_at: datetime,
    ) -> DemandForecast:
        """The step-time forecast: reuses the fitted model; never raises on bad history (it
        answers a degraded seasonal-naive forecast naming the problem instead)."""
        try:
            slot = self._slots.get(service)
            if slot is None or slot.model.step_s != step_s:
                if not self.config.fit_missing_inline:
                    return self._naive(
                        service, history, cluster, step_s, horizon_steps, issued_at, "model not fitted yet"
                    )
                self.refit(service, history, step_s=step_s, horizon_steps=horizon_steps, fitted_at=issued_at)
                slot = self._slots[service]
            self._track_drift(slot, history, issued_at)
            since_fit = max(round((issued_at - slot.fitted_at).total_seconds() / step_s), 0)
            quantiles = self._predict(service, slot, history, horizon_steps, since_fit, issued_at)
        except HistoryError as exc:
            return self._naive(service, [], cluster, step_s, horizon_steps, issued_at, str(exc))
        slot.last_issued_at = issued_at
        slot.last_band = (quantiles["p05"], quantiles["p95"])
        notes = ["drift: refit due"] if slot.drift else []
        if slot.followed is not None:
            move = slot.followed
            notes.append(f"level moved x{move.factor:.2f} at {move.at.isoformat()}: refit due to absorb it")
        extra = "; ".join(notes) or None
        return to_event(
            slot.model,
            quantiles,
            cluster=cluster,
            service=service,
            issued_at=issued_at,
            horizon_steps=horizon_steps,
            extra_reason=extra,
        )

    def _predict(
        self,
        service: str,
        slot: _ServiceSlot,
        history: History,
        horizon_steps: int,
        since_fit: int,
        issued_at: datetime,
    ) -> dict[str, list[float]]:
        """The model's quantiles on the history with the moves absorbed; a level shift it
        follows is recorded on the slot (and makes a refit due, which absorbs it)."""
        step_s = slot.model.step_s
        values = absorbed(history, self._moves.get(service, []), step_s=step_s, now=issued_at)
        quantiles, shift = predict_following_shifts(slot.model, values, horizon_steps, since_fit)
        slot.followed = None
        if shift is not None:
            slot.followed = level_move(
                shift,
                clean_values(values).values,
                model_step_s=slot.model.model_step_s,
                step_s=step_s,
                now=issued_at,
            )
        return quantiles

    @staticmethod
    def _naive(
        service: str,
        history: History,
        cluster: str,
        step_s: int,
        horizon_steps: int,
        issued_at: datetime,
        reason: str,
    ) -> DemandForecast:
        values = np.asarray(history, dtype=float)
        values = values[np.isfinite(values) & (values >= 0)]
        fallback = seasonal_naive(
            values.tolist(),
            cluster=cluster,
            service=service,
            step_s=step_s,
            horizon_steps=horizon_steps,
            issued_at=issued_at,
        )
        reasons = "; ".join(r for r in (reason, fallback.degraded_reason) if r)
        return fallback.model_copy(update={"degraded_reason": reasons})

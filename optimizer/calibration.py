"""Calibrate (pipeline stage 1): each service's forecast checked against the demand that followed.

The planner covers demand at a service's SLO quantile, so a band wider than the forecast's real
misses idles GPUs that batch work could use. Before each decision the calibrator scores the
forecasts it saw in the last day on their first ``lead_steps`` steps (the ones step 0 commits to
and the next re-plans correct), now that those steps' demand is in the history:
r = (demand - p50) / (quantile - p50). The r at the SLO level over those misses is the factor
the band is scaled by (quantile' = p50 + factor x (quantile - p50)), never above ``max_factor``
(1 by default: the source's quantile is the most the plan reserves; too narrow a band is met by
the nowcast floor and by re-planning each step, and widening it cost more batch work than it
saved SLO in the benchmark) and never below ``min_factor``. With too few scored steps the factor
is 1. It learns only from the forecast source's own misses. Pure: the state it keeps is the
recent forecasts; ``now`` is an argument.

A source may widen its band several times over at once while its median stays on demand: a
refit after a change its past did not show (on a held-out workload the Monday after the one
weekend of an 8-day history: the weekend-to-weekday misses of the inner backtest widened
Holt-Winters' p90 to four times its median). The ratios of the last day were scored against the
narrow band, so they kept the wide band for up to a day and the plan reserved it. So the band
over the first leads is also never more than ``max_band_over_misses`` (2) times what the same
window's misses (demand - p50, in GPUs) needed at the SLO level.

Level correction (error persistence): a seasonal forecast that is off now tends to stay off for
a while (the day is busier or quieter than the days it learned from). The calibrator keeps the
source's miss on its first step, e_t = demand_t - p50_t, and estimates from the last day how much
of a miss is still there k steps later, phi_k = sum(e_t e_t+k) / sum(e_t^2), clipped to [0, 1]
and non-increasing in k (0 until enough misses are scored). Each new forecast is shifted, every
quantile alike, by phi_(h+1) x the last miss at lead h (up to ``persist_steps``), and the band
factor above is scored on the shifted forecasts, so a band is narrowed only as far as the
corrected forecast earns.

The correction is only what the source has not already made: a source that follows a miss itself
(the forecaster's level-shift check, forecaster/level_shift.py, or a level refitted on the latest
steps) revises its forecast of a step between one issue and the next, and that revision, where it
goes the way of the miss, is taken off the shift (a shift the source follows in full shifts
nothing more; without this the shift was counted twice). A source that does not revise (seasonal
naive) gets the whole correction.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from schemas import ClusterState, DemandForecast
from schemas.forecast import quantile_level


@dataclass(frozen=True)
class _Issued:
    step: int  # absolute index of the forecast's first step
    p50: list[float]  # [lead] after the level correction (what the plan used)
    upper: list[float]  # [lead] at the SLO quantile, after the level correction
    source_p50: list[float]  # the source's own p50, before the level correction, first leads


class _ServiceRecord:
    def __init__(self, window: int, lead: int) -> None:
        self.issued: deque[_Issued] = deque(maxlen=window)
        self.scored: deque[tuple[float, float]] = deque(maxlen=window * lead)  # (demand - p50, band), GPUs
        self.misses: deque[tuple[int, float]] = deque()  # (absolute step, the source's first-step miss)
        self.scored_through = -1  # last absolute step whose demand was scored
        self.window = window
        self.phi_cache: tuple[int, list[float]] | None = None  # (refreshed at step, phi)

    def remember_miss(self, step: int, miss: float) -> None:
        self.misses.append((step, miss))
        while self.misses[0][0] <= step - self.window:
            self.misses.popleft()

    def miss_at(self, step: int) -> float | None:
        if self.misses and self.misses[-1][0] == step:
            return self.misses[-1][1]
        return None


def _shifted(values: list[float], shift: list[float]) -> list[float]:
    """values[h] + shift[h] floored at 0 for the first min(len) steps (as np.maximum(x, 0.0)
    floors: -0.0 too becomes 0.0)."""
    return [
        total if (total := value + lift) > 0.0 else 0.0 for value, lift in zip(values, shift, strict=False)
    ]


def _not_yet_followed(correction: float, revision: float) -> float:
    """The part of ``correction`` the source's own ``revision`` has not made: the correction less
    a revision the same way, never past zero (a revision the other way takes nothing off)."""
    if correction > 0.0:
        return correction - min(max(revision, 0.0), correction)
    return correction - max(min(revision, 0.0), correction)


class BandCalibrator:
    def __init__(
        self,
        *,
        lead_steps: int = 4,
        window_steps: int = 96,
        min_scored: int = 32,
        min_factor: float = 0.25,
        max_factor: float = 1.0,
        persist_steps: int = 8,
        persistence_refresh_steps: int = 4,
        max_band_over_misses: float = 2.0,
    ) -> None:
        self.max_band_over_misses = max_band_over_misses
        self.lead_steps = lead_steps
        self.persist_steps = persist_steps
        self.persistence_refresh_steps = persistence_refresh_steps  # phi is a day's statistic
        self.window_steps = window_steps
        self.min_scored = min_scored
        self.min_factor = min_factor
        self.max_factor = max_factor
        self._records: dict[str, _ServiceRecord] = {}

    def adjust(
        self, state: ClusterState, forecasts: Mapping[str, DemandForecast], now: datetime
    ) -> tuple[dict[str, DemandForecast], dict[str, float]]:
        """The forecasts after the level correction, and the band factor per service (1.0 until
        enough of its forecasts have been scored). Forecasts at another step size pass unchanged."""
        step_s = state.step_s
        step_now = int(now.timestamp() // step_s)
        adjusted = dict(forecasts)
        factors: dict[str, float] = {}
        for service in state.services:
            name = service.spec.service
            record = self._records.get(name)
            if record is None:
                record = self._records[name] = _ServiceRecord(self.window_steps, self.lead_steps)
            self._score(record, service.demand_history, step_now)
            key = service.spec.slo_quantile
            forecast = forecasts.get(name)
            if forecast is not None and forecast.step_s == step_s:
                key = key if key in forecast.quantiles else "p90"
                source_p50 = [float(v) for v in forecast.curve("p50")[: self.persist_steps + 1]]
                forecast = adjusted[name] = self._level_corrected(record, forecast, step_now)
                lead = min(self.lead_steps, forecast.horizon_steps)
                p50 = [float(v) for v in forecast.curve("p50")[:lead]]
                upper = [float(v) for v in forecast.curve(key)[:lead]]
                record.issued.append(_Issued(step_now, p50, upper, source_p50))
                band_now = sum(u - m for u, m in zip(upper, p50, strict=True)) / lead
                factors[name] = self._factor(record, quantile_level(key), band_now)
            else:
                factors[name] = self._factor(record, quantile_level(key))
        return adjusted, factors

    def persistence(self, record: _ServiceRecord) -> np.ndarray:
        """phi_k for k = 1..persist_steps: how much of a first-step miss is left k steps later."""
        phi = np.zeros(self.persist_steps)
        if len(record.misses) < self.min_scored:
            return phi
        steps, values = zip(*record.misses, strict=True)
        first = steps[0]
        size = steps[-1] - first + 1
        at = np.asarray(steps, dtype=np.int64) - first
        miss, seen = np.zeros(size), np.zeros(size)
        miss[at], seen[at] = values, 1.0
        lags = min(self.persist_steps, size - 1)
        middle = size - 1  # np.correlate(a, v, "full")[size - 1 + k] = sum over t of a[t + k] v[t]
        products = np.correlate(miss, miss, "full")[middle + 1 : middle + 1 + lags]
        energies = np.correlate(seen, miss * miss, "full")[middle + 1 : middle + 1 + lags]
        pairs = np.correlate(seen, seen, "full")[middle + 1 : middle + 1 + lags]
        enough = (pairs >= self.min_scored).cumprod().astype(bool)  # stop at the first lag short of pairs
        usable = enough & (energies > 1e-9)
        phi[:lags][usable] = (products[usable] / energies[usable]).clip(0.0, 1.0)
        return np.minimum.accumulate(phi)

    def _level_corrected(
        self, record: _ServiceRecord, forecast: DemandForecast, step_now: int
    ) -> DemandForecast:
        last_miss = record.miss_at(step_now - 1)
        if last_miss is None or abs(last_miss) < 1e-9:
            return forecast
        cached = record.phi_cache
        if cached is None or step_now - cached[0] >= self.persistence_refresh_steps:
            cached = record.phi_cache = (step_now, self.persistence(record).tolist())
        # a few values per curve: plain floats cost less than numpy calls (same arithmetic)
        revised = self._source_revision(record, forecast, step_now)
        shift = [_not_yet_followed(phi * last_miss, rev) for phi, rev in zip(cached[1], revised, strict=True)]
        if not any(shift):
            return forecast
        span = min(len(shift), forecast.horizon_steps)
        quantiles = {
            key: _shifted(values, shift) + values[span:] for key, values in forecast.quantiles.items()
        }
        return forecast.model_copy(update={"quantiles": quantiles})

    def _source_revision(
        self, record: _ServiceRecord, forecast: DemandForecast, step_now: int
    ) -> list[float]:
        """How far the source moved its p50 of each of the next ``persist_steps`` steps since its
        forecast of the step before (0 where that forecast is missing or did not reach the step)."""
        revised = [0.0] * self.persist_steps
        previous = record.issued[-1] if record.issued else None
        if previous is None or previous.step != step_now - 1:
            return revised
        now_p50 = forecast.curve("p50")
        for h in range(min(self.persist_steps, len(previous.source_p50) - 1, len(now_p50))):
            revised[h] = float(now_p50[h]) - previous.source_p50[h + 1]
        return revised

    def _score(self, record: _ServiceRecord, history: list[float], step_now: int) -> None:
        """Score every recorded forecast step whose demand the history now holds."""
        last = step_now - 1  # history[-1] is the step that just ended
        first = max(record.scored_through + 1, last - len(history) + 1)
        for step in range(first, last + 1):
            demand = history[len(history) - 1 - (last - step)]
            for issued in record.issued:
                h = step - issued.step
                if h == 0:
                    record.remember_miss(step, demand - issued.source_p50[0])
                if 0 <= h < len(issued.p50):
                    band = issued.upper[h] - issued.p50[h]
                    if band > 1e-6:
                        record.scored.append((demand - issued.p50[h], band))
        record.scored_through = max(record.scored_through, last)

    def _factor(self, record: _ServiceRecord, level: float, band_now: float | None = None) -> float:
        """The higher quantile at ``level`` of the scored ratios, and where the source's band over
        the first leads now is known, at most ``max_band_over_misses`` x what the same window's
        misses at that level needed of it (a band the source has just widened)."""
        if len(record.scored) < self.min_scored:
            return 1.0
        factor = _higher_quantile([miss / band for miss, band in record.scored], level)
        if band_now is not None and band_now > 1e-6:
            needed = max(_higher_quantile([miss for miss, _ in record.scored], level), 0.0)
            factor = min(factor, self.max_band_over_misses * needed / band_now)
        return min(max(factor, self.min_factor), self.max_factor)


def _higher_quantile(values: list[float], level: float) -> float:
    ordered = sorted(values)
    k = min(math.ceil(level * (len(ordered) - 1)), len(ordered) - 1)  # numpy's "higher" quantile
    return float(ordered[k])

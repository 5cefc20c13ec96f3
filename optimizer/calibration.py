"""BandCalibrator: each service's forecast band checked against the demand that followed.

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
    p50: np.ndarray  # [lead]
    upper: np.ndarray  # [lead] at the SLO quantile


class _ServiceRecord:
    def __init__(self, window: int, lead: int) -> None:
        self.issued: deque[_Issued] = deque(maxlen=window)
        self.ratios: deque[float] = deque(maxlen=window * lead)
        self.scored_through = -1  # last absolute step whose demand was scored


class BandCalibrator:
    def __init__(
        self,
        *,
        lead_steps: int = 4,
        window_steps: int = 96,
        min_scored: int = 32,
        min_factor: float = 0.25,
        max_factor: float = 1.0,
    ) -> None:
        self.lead_steps = lead_steps
        self.window_steps = window_steps
        self.min_scored = min_scored
        self.min_factor = min_factor
        self.max_factor = max_factor
        self._records: dict[str, _ServiceRecord] = {}

    def factors(
        self, state: ClusterState, forecasts: Mapping[str, DemandForecast], now: datetime
    ) -> dict[str, float]:
        """Band factor per service (1.0 until enough of its forecasts have been scored)."""
        step_s = state.step_s
        step_now = int(now.timestamp() // step_s)
        out: dict[str, float] = {}
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
                lead = min(self.lead_steps, forecast.horizon_steps)
                p50 = np.asarray(forecast.curve("p50")[:lead], dtype=float)
                upper = np.asarray(forecast.curve(key)[:lead], dtype=float)
                record.issued.append(_Issued(step_now, p50, upper))
            out[name] = self._factor(record, quantile_level(key))
        return out

    def _score(self, record: _ServiceRecord, history: list[float], step_now: int) -> None:
        """Score every recorded forecast step whose demand the history now holds."""
        last = step_now - 1  # history[-1] is the step that just ended
        first = max(record.scored_through + 1, last - len(history) + 1)
        for step in range(first, last + 1):
            demand = history[len(history) - 1 - (last - step)]
            for issued in record.issued:
                h = step - issued.step
                if 0 <= h < issued.p50.size:
                    band = issued.upper[h] - issued.p50[h]
                    if band > 1e-6:
                        record.ratios.append((demand - issued.p50[h]) / band)
        record.scored_through = max(record.scored_through, last)

    def _factor(self, record: _ServiceRecord, level: float) -> float:
        if len(record.ratios) < self.min_scored:
            return 1.0
        ratios = np.fromiter(record.ratios, dtype=float, count=len(record.ratios))
        k = min(math.ceil(level * (ratios.size - 1)), ratios.size - 1)  # numpy's "higher" quantile
        factor = float(np.partition(ratios, k)[k])
        return min(max(factor, self.min_factor), self.max_factor)

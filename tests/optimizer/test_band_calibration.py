"""The calibrator's band factor is numpy's "higher" quantile of the scored window of ratios,
whatever order the forecasts arrive in (checked against a plain computation of the definition).
"""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
from optimizer_cases import NOW, forecast, pool, service, state

from optimizer.calibration import BandCalibrator
from schemas import DemandForecast


def _band_forecast(p50: float, upper: float, at: int) -> DemandForecast:
    return forecast("chat", [p50] * 8).model_copy(
        update={
            "issued_at": NOW + timedelta(seconds=900 * at),
            "quantiles": {"p50": [p50] * 8, "p90": [upper] * 8, "p99": [upper + 1.0] * 8},
        }
    )


class _PlainScoring:
    """The calibrator's band factor computed the plain way: every new step's demand against every
    forecast still in the window, the factor by np.quantile (flat forecasts, no level correction)."""

    def __init__(self, window: int, lead: int, min_scored: int) -> None:
        self.window, self.lead, self.min_scored = window, lead, min_scored
        self.issued: list[int] = []
        self.ratios: list[float] = []
        self.scored_through = -1

    def factor(self, history: list[float], step_now: int, p50: float, upper: float) -> float:
        last = step_now - 1
        for step in range(max(self.scored_through + 1, last - len(history) + 1), last + 1):
            demand = history[len(history) - 1 - (last - step)]
            for issued in self.issued:
                if 0 <= step - issued < self.lead:
                    self.ratios.append((demand - p50) / (upper - p50))
        self.scored_through = max(self.scored_through, last)
        self.issued = [*self.issued, step_now][-self.window :]
        window = np.asarray(self.ratios[-self.window * self.lead :])
        if window.size < self.min_scored:
            return 1.0
        return float(np.quantile(window, 0.9, method="higher"))


@pytest.mark.parametrize(
    "steps", [list(range(60)), [0, 1, 2, 1, 3, 4, 2, 5, 6, 9, 8, 9, 10, 3, *range(11, 40)]]
)
def test_band_factor_is_the_higher_quantile_of_the_scored_window(steps: list[int]) -> None:
    rng = np.random.default_rng(3)
    calibrator = BandCalibrator(
        min_scored=8, window_steps=12, min_factor=-10.0, max_factor=10.0, persist_steps=0
    )
    plain = _PlainScoring(window=12, lead=4, min_scored=8)
    history: list[float] = []
    factors = []
    for at in steps:
        chat = service("chat", slo_quantile="p90").model_copy(update={"demand_history": list(history)})
        now = NOW + timedelta(seconds=900 * at)
        _, factor = calibrator.adjust(
            state([pool("a", 64)], [], [chat]), {"chat": _band_forecast(10.0, 14.0, at)}, now
        )
        assert factor["chat"] == plain.factor(history, int(now.timestamp()) // 900, 10.0, 14.0)
        factors.append(factor["chat"])
        history.append(float(rng.uniform(4.0, 18.0)))
    assert len(set(factors)) > 3  # the window moved the factor


def test_a_band_that_widens_at_once_is_cut_to_twice_the_misses_of_the_last_day() -> None:
    """A source that refits after a change its past did not show (a Monday after the one weekend
    in its history) may widen its band several times over while its median stays on demand; the
    ratios of the last day were scored against the narrow band, so the factor alone would keep the
    wide band for a day. The band is cut to twice the misses at the SLO level (in GPUs) of the last
    day."""
    rng = np.random.default_rng(5)
    calibrator = BandCalibrator(persist_steps=0)
    history: list[float] = []
    chat = service("chat", slo_quantile="p90")

    def factor_at(at: int, upper: float) -> float:
        now = NOW + timedelta(seconds=900 * at)
        current = chat.model_copy(update={"demand_history": list(history)})
        _, factors = calibrator.adjust(
            state([pool("a", 64)], [], [current]), {"chat": _band_forecast(10.0, upper, at)}, now
        )
        return factors["chat"]

    for at in range(40):
        narrow = factor_at(at, 12.0)
        history.append(float(rng.uniform(9.0, 11.6)))
    assert 0.6 < narrow <= 0.8  # ratios of up to 1.6 GPUs over a band of 2
    wide = factor_at(40, 30.0)
    assert wide == calibrator.min_factor  # twice 1.6 GPUs of a band of 20 is under the floor of 0.25

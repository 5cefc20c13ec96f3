"""The ForecastBank absorbs a level shift it followed: it records the move (when, by what
factor), refits on the history with the steps before the move scaled by it, and from then on
forecasts at the new level, a day later included, where the old level would otherwise come back
with the daily profile; a move back undoes the earlier one; a move last week also made is weekly
and is followed, not absorbed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from forecaster_synthetic import synthetic_hourly

from forecaster import ForecastBank
from forecaster.level_moves import LevelMove, absorbed, level_move
from forecaster.level_shift import Shift

DAYS = 16
WINDOW = 8 * 24  # the simulator's eight days of hourly history
START = datetime(2026, 1, 5, tzinfo=UTC)


def _p50_misses(
    values: np.ndarray, truth: np.ndarray, at: int, hours: range
) -> tuple[ForecastBank, list[float]]:
    """Step the bank hourly over ``hours`` after ``at`` (refits as due, as the loop does); the
    relative error of each p50 over the next 12 hours against ``truth``."""
    bank = ForecastBank()
    misses = []
    for now in range(at - 1, at + hours.stop):
        issued = START + timedelta(hours=now)
        history = values[now - WINDOW : now]
        if bank.refit_due("svc", issued, 3600):
            bank.refit("svc", history, step_s=3600, horizon_steps=24, fitted_at=issued)
        p50 = bank.forecast("svc", history, cluster="c", step_s=3600, horizon_steps=24, issued_at=issued)
        if now - at in hours:
            ahead = truth[now : now + 12]
            misses.append(
                float(np.mean(np.abs(np.asarray(p50.quantiles["p50"][:12]) - ahead)) / np.mean(ahead))
            )
    return bank, misses


@pytest.mark.parametrize(("seed", "hour", "times"), [(9, 5, 2.5), (10, 14, 0.3), (13, 20, 1.8)])
def test_a_followed_shift_is_absorbed_and_stays_learned_a_day_later(
    seed: int, hour: int, times: float
) -> None:
    values = synthetic_hourly(DAYS + 3, seed=seed)
    at = DAYS * 24 + hour
    values[at:] *= times
    bank, misses = _p50_misses(values, values, at, range(6, 36))
    moves = bank._moves["svc"]
    # the first move is the change; later ones (if any) refine its factor as more of it is seen
    assert abs(moves[0].at - (START + timedelta(hours=at))) <= timedelta(hours=2), moves
    assert np.prod([m.factor for m in moves]) == pytest.approx(times, rel=0.2), moves
    # from six hours after the change to a day and a half: the p50 stays within 20% of demand
    assert max(misses) < 0.2, np.round(misses, 3)


def test_no_move_is_recorded_without_a_change() -> None:
    values = synthetic_hourly(DAYS + 3, seed=11)
    bank, misses = _p50_misses(values, values, DAYS * 24, range(0, 36))
    assert bank._moves.get("svc", []) == []
    assert np.mean(misses) < 0.15


def test_a_move_back_undoes_the_earlier_one() -> None:
    now = START + timedelta(hours=10)
    up = LevelMove(at=now - timedelta(hours=6), factor=2.0)
    back = LevelMove(at=now - timedelta(hours=3), factor=0.5)
    scaled = absorbed(np.ones(10), [up, back], step_s=3600, now=now)
    assert scaled.tolist() == [1.0] * 4 + [0.5] * 3 + [1.0] * 3


def test_a_move_the_same_hours_made_last_week_is_weekly_and_not_absorbed() -> None:
    now = START + timedelta(days=14)
    week = 7 * 24
    history = np.full(2 * week, 10.0)
    history[-6:] = 20.0  # the level doubled six hours ago
    shift = Shift(steps_ago=6, miss=1.0, factor=2.0)
    assert level_move(shift, history, model_step_s=3600, step_s=3600, now=now) == LevelMove(
        at=now - timedelta(hours=6), factor=2.0
    )
    history[-week - 6 : -week] = 20.0  # ... and so it did a week ago
    assert level_move(shift, history, model_step_s=3600, step_s=3600, now=now) is None


def test_bad_history_after_a_move_gives_a_degraded_forecast_instead_of_raising() -> None:
    values = synthetic_hourly(DAYS + 3, seed=9)
    at = DAYS * 24 + 5
    values[at:] *= 2.5
    bank, _ = _p50_misses(values, values, at, range(6, 8))
    assert bank._moves["svc"]  # the bank holds a move, so it scales what it is handed
    issued = START + timedelta(hours=at + 9)
    bad = [*values[at + 9 - WINDOW : at + 8].tolist(), "lots"]
    result = bank.forecast("svc", bad, cluster="c", step_s=3600, horizon_steps=24, issued_at=issued)
    assert result.degraded_reason is not None and "demand_history" in result.degraded_reason

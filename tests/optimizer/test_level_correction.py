"""The calibrator's level correction: a forecast that keeps missing in one direction is shifted
by the part of its last miss that the recent misses say persists; misses that do not persist
shift nothing; the plan then covers the corrected level."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
from optimizer_cases import NOW, forecast, pool, service, state

from optimizer.calibration import BandCalibrator
from optimizer.planner import PlannerPolicy
from schemas import ClusterState, DemandForecast

LEAD = 24


def _forecast(p50: float, p90: float, at: int, step_s: int = 900) -> DemandForecast:
    return forecast("chat", [p50] * LEAD).model_copy(
        update={
            "issued_at": NOW + timedelta(seconds=900 * at),
            "step_s": step_s,
            "quantiles": {"p50": [p50] * LEAD, "p90": [p90] * LEAD, "p99": [p90 + 5.0] * LEAD},
        }
    )


def _state(history: list[float], at: int) -> ClusterState:
    chat = service("chat").model_copy(update={"demand_history": history})
    return state([pool("a", 64)], [], [chat]).model_copy(update={"as_of": NOW + timedelta(seconds=900 * at)})


def _run(calibrator: BandCalibrator, demand_at, steps: int, step_s: int = 900):
    history: list[float] = []
    corrected = None
    for t in range(steps):
        now = NOW + timedelta(seconds=900 * t)
        fc = _forecast(10.0, 14.0, t, step_s)
        adjusted, factors = calibrator.adjust(_state(list(history), t), {"chat": fc}, now)
        corrected = (fc, adjusted["chat"], factors["chat"])
        history.append(demand_at(t))
    return corrected


def test_a_persistent_miss_shifts_the_near_steps_by_the_miss() -> None:
    calibrator = BandCalibrator(min_scored=8, persist_steps=8)
    source, corrected, _ = _run(calibrator, lambda t: 15.0, 40)  # always 5 GPUs above p50
    p50 = np.asarray(corrected.curve("p50"))
    # the whole miss persists (phi = 1), for persist_steps steps, every quantile alike
    assert np.allclose(p50[:8], 15.0)
    assert np.allclose(p50[8:], 10.0)
    assert np.allclose(np.asarray(corrected.curve("p90"))[:8], 19.0)
    assert source.curve("p50")[0] == 10.0  # the source's forecast is not modified


def test_misses_that_do_not_persist_shift_nothing() -> None:
    calibrator = BandCalibrator(min_scored=8, persist_steps=8)
    # misses alternate +6 / -6 around the p50: the next step's miss is the opposite one
    _, corrected, _ = _run(calibrator, lambda t: 10.0 + (6.0 if t % 2 else -6.0), 40)
    assert np.allclose(corrected.curve("p50"), 10.0)


def test_a_decaying_miss_is_carried_in_part() -> None:
    calibrator = BandCalibrator(min_scored=8, persist_steps=8)
    # a miss of 4 GPUs for 3 steps in every 8: of a miss, 2/3 is left one step later, 1/3 two
    # steps later, nothing after that; the last step observed is the first of a miss
    _, corrected, _ = _run(calibrator, lambda t: 14.0 if t % 8 < 3 else 10.0, 42)
    p50 = np.asarray(corrected.curve("p50"))
    assert np.allclose(p50[:3], [10.0 + 4.0 * 2 / 3, 10.0 + 4.0 / 3, 10.0])
    assert np.allclose(p50[3:], 10.0)


def test_a_forecast_at_another_step_size_passes_unchanged() -> None:
    calibrator = BandCalibrator(min_scored=8, persist_steps=8)
    source, corrected, factor = _run(calibrator, lambda t: 15.0, 40, step_s=300)
    assert corrected is source and factor == 1.0


def test_the_plan_covers_the_corrected_level() -> None:
    policy = PlannerPolicy()
    history = [15.0] * 8
    for t in range(60):
        now = NOW + timedelta(seconds=900 * t)
        fc = forecast("chat", [10.0] * 96).model_copy(
            update={
                "issued_at": now,
                "quantiles": {"p50": [10.0] * 96, "p90": [12.0] * 96, "p99": [13.0] * 96},
            }
        )
        decision = policy.decide(_state(list(history), t), {"chat": fc}, now)
        history.append(15.0 + 0.5 * (t % 3))
    reserved = sum(s.gpus for s in decision.allocation.services if s.service == "chat")
    # the source's p90 says 12; demand has stayed 15-16 all along
    assert reserved >= 16.0


def _follow(calibrator: BandCalibrator, source_p50_at, steps: int) -> DemandForecast:
    """Demand 15 throughout; the source forecasts ``source_p50_at(t)`` flat at step t."""
    history: list[float] = []
    adjusted = None
    for t in range(steps):
        p50 = source_p50_at(t)
        fc = _forecast(p50, p50 + 4.0, t)
        adjusted = calibrator.adjust(
            _state(list(history), t), {"chat": fc}, NOW + timedelta(seconds=900 * t)
        )[0]["chat"]
        history.append(15.0)
    assert adjusted is not None
    return adjusted


def test_a_miss_the_source_has_followed_is_not_corrected_again() -> None:
    # 40 steps 5 GPUs under (the whole miss persists: phi = 1); at step 40 the source itself moves
    # to the demand (a level shift it detected): the calibrator adds nothing on top of that move
    followed = _follow(BandCalibrator(min_scored=8, persist_steps=8), lambda t: 10.0 if t < 40 else 15.0, 41)
    assert np.allclose(followed.curve("p50"), 15.0)  # before: 20 on the first 8 steps (counted twice)
    # a source that moved 3 of the 5 GPUs gets the 2 it has not moved
    partly = _follow(BandCalibrator(min_scored=8, persist_steps=8), lambda t: 10.0 if t < 40 else 13.0, 41)
    assert np.allclose(partly.curve("p50")[:8], 15.0)
    assert np.allclose(partly.curve("p50")[8:], 13.0)
    # a source that moved the other way is corrected by the whole persisting miss, not more
    away = _follow(BandCalibrator(min_scored=8, persist_steps=8), lambda t: 10.0 if t < 40 else 9.0, 41)
    assert np.allclose(away.curve("p50")[:8], 14.0)

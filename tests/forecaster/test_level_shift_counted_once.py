"""A level shift is counted once between the forecaster and the planner's calibrator: the
forecaster follows a step change in demand within a few steps (forecaster/level_shift.py) and the
calibrator's level correction (optimizer/calibration.py), which shifts each forecast by the part
of the last miss that persists, then adds nothing the forecaster has already moved. Before, the
calibrator added the whole last miss again on the step the forecaster followed: the forecast
overshot the new level by about the shift. Real forecaster and calibrator, a rolling eight-day
history (as the simulator's state keeps), hourly steps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from forecaster_synthetic import synthetic_hourly

from forecaster.auto import fit_service, predict_quantiles, to_event
from forecaster.level_shift import SHIFT_STEPS
from optimizer.calibration import BandCalibrator
from schemas import ClusterState, PoolState, ServiceSpec, ServiceState

DAYS = 16
WINDOW = 8 * 24
WARM_UP = 60  # steps before the change: the calibrator has scored enough misses to correct
NOW = datetime(2026, 11, 30, 0, 0, tzinfo=UTC)
AHEAD = 4  # the steps the calibrator corrects and step 0 commits to


def _state(history: np.ndarray, at: datetime) -> ClusterState:
    chat = ServiceState(spec=ServiceSpec(service="chat"), replicas={}, demand_history=history.tolist())
    pool = PoolState(name="a", gpu_type="h100", gpus_total=64, gpus_available=64)
    return ClusterState(cluster="test", as_of=at, step_s=3600, pools=[pool], jobs=[], services=[chat])


@pytest.mark.parametrize(("seed", "hour", "change"), [(7, 5, "+8"), (9, 5, "x2.5"), (10, 14, "x0.3")])
def test_a_followed_level_shift_is_not_corrected_twice(seed: int, hour: int, change: str) -> None:
    base = synthetic_hourly(DAYS + 2, seed=seed)
    at = DAYS * 24 + hour
    shifted = base.copy()
    shifted[at:] = shifted[at:] + 8.0 if change == "+8" else shifted[at:] * float(change[1:])
    up = 1.0 if shifted[at] > base[at] else -1.0
    start = at - WARM_UP
    fitted = fit_service(shifted[start - WINDOW : start], step_s=3600, horizon_steps=24)
    calibrator = BandCalibrator()
    for now in range(start, at + SHIFT_STEPS + 6):
        history = shifted[now - WINDOW : now]
        issued = NOW + timedelta(hours=now - start)
        source = to_event(
            fitted,
            predict_quantiles(fitted, history, 24, steps_since_fit=now - start),
            cluster="test",
            service="chat",
            issued_at=issued,
            horizon_steps=24,
        )
        corrected = calibrator.adjust(_state(history, issued), {"chat": source}, issued)[0]["chat"]
        if now < at:
            continue
        truth = shifted[now : now + AHEAD]
        own = up * (np.asarray(source.curve("p50")[:AHEAD]) - truth).mean()
        total = up * (np.asarray(corrected.curve("p50")[:AHEAD]) - truth).mean()
        step = np.abs(truth - base[now : now + AHEAD]).mean()
        # never past the new level by more than the forecaster alone went (plus a tenth of the step)
        assert total <= max(own, 0.0) + 0.1 * step, (now - at, own, total, step)
        if now - at >= SHIFT_STEPS + 2:  # and the shift is followed: within half the step of it
            assert abs(total) < 0.5 * step, (now - at, total, step)

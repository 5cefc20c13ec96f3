"""Seasonal-naive forecasting: the floor every other model must beat, and the loop's fallback.

The forecast for a step is the value one season (a day) earlier; the quantile bands come from
the spread of past seasonal differences. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import numpy as np

from schemas import DemandForecast
from schemas.bounds import MAX_DEMAND_GPUS

DAY_S = 24 * 3600


def seasonal_naive(
    history: Sequence[float],
    *,
    cluster: str,
    service: str,
    step_s: int,
    horizon_steps: int,
    issued_at: datetime,
) -> DemandForecast:
    """Repeat the last season; bands from quantiles of past season-over-season changes."""
    season = max(DAY_S // step_s, 1)
    values = np.asarray(history, dtype=float)
    degraded = None
    if values.size == 0:
        values = np.zeros(1)
        degraded = "no demand history: forecasting zero with no band"
    if values.size >= season:
        base = np.array([values[values.size - season + (h % season)] for h in range(horizon_steps)])
        diffs = np.abs(values[season:] - values[:-season]) if values.size > season else np.zeros(1)
    else:
        base = np.full(horizon_steps, float(values[-1]))
        diffs = np.abs(np.diff(values)) if values.size > 1 else np.zeros(1)
        degraded = degraded or (
            f"history of {values.size} steps is shorter than one day: repeating the last value"
        )
    spread = {q: float(np.quantile(diffs, level)) for q, level in (("p90", 0.8), ("p99", 0.98))}
    p50 = np.clip(base, 0.0, MAX_DEMAND_GPUS)
    p90 = np.minimum(p50 + spread["p90"], MAX_DEMAND_GPUS)
    p99 = np.minimum(np.maximum(p90, p50 + spread["p99"]), MAX_DEMAND_GPUS)
    return DemandForecast(
        cluster=cluster,
        service=service,
        issued_at=issued_at,
        step_s=step_s,
        horizon_steps=horizon_steps,
        quantiles={"p50": p50.tolist(), "p90": p90.tolist(), "p99": p99.tolist()},
        model="seasonal-naive",
        degraded_reason=degraded,
    )

"""ForecastSources only the simulated loop can use: none (the baselines) and the oracle.

A policy sees the future only through these. ``OracleSource`` is the only one that reads the
simulator's true demand (every quantile equals the truth): it feeds ``ebbtide-true-demand``, the
planner with perfect demand forecasts (not an upper bound; that is simulator/bound.py).
``ModelSource`` (any function with seasonal_naive's signature) and ``SeasonalNaiveSource`` come
from forecaster.source, as does the forecaster's own stateful source (BankForecastSource).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from schemas import ClusterState, DemandForecast
from simulator.cluster import Simulator


class NoForecastSource:
    """For policies that use no forecast (the baselines): nothing to compute."""

    def forecasts(self, state: ClusterState, now: datetime) -> Mapping[str, DemandForecast]:
        return {}


class OracleSource:
    """The true future demand (step means) as a forecast with every quantile equal to it."""

    def __init__(self, sim: Simulator, horizon_steps: int) -> None:
        self.sim = sim
        self.horizon_steps = horizon_steps

    def forecasts(self, state: ClusterState, now: datetime) -> Mapping[str, DemandForecast]:
        from_s = (now - self.sim.scenario.start).total_seconds()
        out = {}
        for svc in state.services:
            truth: Sequence[float] = self.sim.true_step_demand(svc.spec.service, from_s, self.horizon_steps)
            out[svc.spec.service] = DemandForecast(
                cluster=state.cluster,
                service=svc.spec.service,
                issued_at=now,
                step_s=state.step_s,
                horizon_steps=len(truth),
                quantiles={q: list(truth) for q in ("p50", "p90", "p99")},
                model="oracle",
            )
        return out

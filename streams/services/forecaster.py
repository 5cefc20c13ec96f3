"""The forecaster service: a DemandForecast per service on every step, and again on drift.

A thin adapter over a :class:`loop.ForecastSource` (the forecaster's model bank when
present, the seasonal-naive floor otherwise). It reads ClusterState snapshots; at a step boundary
it forecasts every service, issued at the snapshot's ``as_of`` (so the optimizer can pair a state
with the forecasts made from it). Between steps it re-forecasts a service only when its latest
demand left the band of its last forecast (drift). With ``cluster`` set (as ``ebbtide run
forecaster`` sets it) it forecasts only that cluster, and it keeps only the services the latest
state has: its memory is bounded by the cluster, not by every name ever sent.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from loop import ForecastSource
from schemas import ClusterState, DemandForecast
from schemas.base import Event
from schemas.topics import CLUSTER_STATE, FORECASTS, Topic
from streams.fold import floor_to_step
from streams.services.runtime import Outgoing


def drifted(forecast: DemandForecast, actual_gpus: float, at: datetime, band: str = "p99") -> bool:
    """The demand at ``at`` lies above the forecast's ``band`` quantile (or below its p50 band mirror)."""
    index = int((at - forecast.issued_at).total_seconds() // forecast.step_s)
    if index < 0 or index >= forecast.horizon_steps:
        return True
    upper = (
        forecast.quantiles[band][index] if band in forecast.quantiles else forecast.quantiles["p99"][index]
    )
    p50 = forecast.quantiles["p50"][index]
    lower = max(p50 - (upper - p50), 0.0)
    return actual_gpus > upper + 1e-9 or actual_gpus < lower - 1e-9


@dataclass
class ForecasterProcessor:
    source: ForecastSource
    drift_band: str = "p99"
    cluster: str | None = None
    name: str = "forecaster"
    inputs: tuple[Topic, ...] = (CLUSTER_STATE,)
    latest: dict[tuple[str, str], DemandForecast] = field(default_factory=dict)
    emitted: int = 0
    drift_forecasts: int = 0

    def on_event(self, source: Topic, event: Event) -> Iterable[Outgoing]:
        assert isinstance(event, ClusterState)
        state = event
        if self.cluster is not None and state.cluster != self.cluster:
            return ()  # another cluster's: its own forecaster serves it
        self._forget_services_gone(state)
        at_boundary = floor_to_step(state.as_of, state.step_s) == state.as_of
        wanted: set[str] = set()
        for svc in state.services:
            last = self.latest.get((state.cluster, svc.spec.service))
            if at_boundary or last is None:
                wanted.add(svc.spec.service)
            elif svc.demand_history and drifted(last, svc.demand_history[-1], state.as_of, self.drift_band):
                wanted.add(svc.spec.service)
                self.drift_forecasts += 1
        if not wanted:
            return ()
        made = self.source.forecasts(state, state.as_of)
        out: list[Outgoing] = []
        for service in sorted(wanted):
            forecast = made.get(service)
            if forecast is None:
                continue
            self.latest[(state.cluster, service)] = forecast
            out.append((FORECASTS, forecast))
        self.emitted += len(out)
        return out

    def _forget_services_gone(self, state: ClusterState) -> None:
        present = {svc.spec.service for svc in state.services}
        for key in [k for k in self.latest if k[0] == state.cluster and k[1] not in present]:
            del self.latest[key]

    def on_rewind(self) -> None:
        """Forecasts since the last commit may not have been delivered: forecast the replayed states anew."""
        self.latest.clear()

    def on_idle(self) -> Iterable[Outgoing]:
        return ()

    def pending(self) -> bool:
        return False

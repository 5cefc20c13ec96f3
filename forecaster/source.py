"""ForecastSources the control loop calls each step (simulator and production alike).

``ModelSource`` forecasts every service from its demand history with one model function
(``SeasonalNaiveSource``: the seasonal-naive floor). ``BankForecastSource`` is backed by a
ForecastBank. It reads each service's demand_history (busy GPUs
per ``state.step_s`` step, ending at ``state.as_of``) and returns one DemandForecast per service.

With ``refit_inline`` (the simulator's choice: deterministic, blocking) refits that are due run
inside ``forecasts``; without it the caller runs ``bank_for(cluster).refit`` for ``due(state)``
services in a background thread of its own. Pure: no clock, no threads, no imports of simulator/ or ebbtide/.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import datetime

from forecaster.auto import DAY_S
from forecaster.bank import ForecastBank
from forecaster.naive import seasonal_naive
from schemas import ClusterState, DemandForecast

ForecastFn = Callable[..., DemandForecast]
"""fn(history, *, cluster, service, step_s, horizon_steps, issued_at) -> DemandForecast"""


class ModelSource:
    """Forecast every service from the demand history in the state with ``fn``."""

    def __init__(self, fn: ForecastFn, horizon_steps: int) -> None:
        self.fn = fn
        self.horizon_steps = horizon_steps

    def forecasts(self, state: ClusterState, now: datetime) -> dict[str, DemandForecast]:
        return {
            svc.spec.service: self.fn(
                svc.demand_history,
                cluster=state.cluster,
                service=svc.spec.service,
                step_s=state.step_s,
                horizon_steps=self.horizon_steps,
                issued_at=now,
            )
            for svc in state.services
        }


class SeasonalNaiveSource(ModelSource):
    """The forecast floor: repeat yesterday, band from past day-over-day changes."""

    def __init__(self, horizon_steps: int) -> None:
        super().__init__(seasonal_naive, horizon_steps)


class BankForecastSource:
    """One ForecastBank per cluster: the forecaster serves every cluster on the cluster-state topic,
    and two clusters' services of one name are two demands (one bank for all would forecast one
    cluster's ``chat`` with a model fitted to another's, and a state of any cluster would refit it).
    ``bank`` is the first cluster's bank (its config is every later one's)."""

    def __init__(
        self, bank: ForecastBank | None = None, *, horizon_s: int = DAY_S, refit_inline: bool = True
    ) -> None:
        if horizon_s <= 0:
            raise ValueError(f"horizon_s: must be positive, got {horizon_s}")
        self._first: ForecastBank | None = bank
        self._config = bank.config if bank is not None else ForecastBank().config
        self.banks: dict[str, ForecastBank] = {}
        self.horizon_s = horizon_s
        self.refit_inline = refit_inline

    def bank_for(self, cluster: str) -> ForecastBank:
        bank = self.banks.get(cluster)
        if bank is None:
            bank, self._first = self._first or ForecastBank(config=self._config), None
            self.banks[cluster] = bank
        return bank

    def horizon_steps(self, state: ClusterState) -> int:
        return max(-(-self.horizon_s // state.step_s), 1)

    def due(self, state: ClusterState) -> list[str]:
        """Services whose refit is due at ``state.as_of``."""
        bank = self.bank_for(state.cluster)
        return [
            s.spec.service
            for s in state.services
            if bank.refit_due(s.spec.service, state.as_of, state.step_s)
        ]

    def forecasts(self, state: ClusterState, now: datetime) -> dict[str, DemandForecast]:
        horizon_steps = self.horizon_steps(state)
        bank = self.bank_for(state.cluster)
        bank.keep_only({s.spec.service for s in state.services})
        out: dict[str, DemandForecast] = {}
        for service_state in state.services:
            name = service_state.spec.service
            history = service_state.demand_history
            if self.refit_inline and history and bank.refit_due(name, state.as_of, state.step_s):
                # bad history: bank.forecast below answers a degraded forecast naming the problem
                with contextlib.suppress(ValueError):
                    bank.refit(
                        name, history, step_s=state.step_s, horizon_steps=horizon_steps, fitted_at=state.as_of
                    )
            out[name] = bank.forecast(
                name,
                history,
                cluster=state.cluster,
                step_s=state.step_s,
                horizon_steps=horizon_steps,
                issued_at=state.as_of,
            )
        return out

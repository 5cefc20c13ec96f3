"""Which policies the benchmark runs: name -> factory of (Policy, ForecastSource) for one run.

The three baselines are always here. If ``optimizer.planner`` exists and defines
``PlannerPolicy`` (constructor ``PlannerPolicy(name: str = "ebbtide")``), two more appear:
``ebbtide`` (forecasts from seasonal-naive, or the plug-in forecaster) and ``oracle`` (the true
future demand). Another policy: ``register_policy(name, factory)``, or add it to
``baseline_factories``. The registry maps names to constructors; nothing dispatches on a name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from ebbtide.loop import ForecastSource
from optimizer.policy import Policy
from simulator.cluster import Simulator
from simulator.forecast_sources import (
    ModelSource,
    NoForecastSource,
    OracleSource,
    SeasonalNaiveSource,
    plugin_forecast_fn,
)
from simulator.policies.fifo import FifoPolicy
from simulator.policies.priority_backfill import PriorityBackfillPolicy
from simulator.policies.reactive import ReactivePolicy

PolicyFactory = Callable[[Simulator], tuple[Policy, ForecastSource]]

_EXTRA: dict[str, PolicyFactory] = {}


def horizon_steps(sim: Simulator) -> int:
    """Forecast horizon for planners: one day of steps."""
    return max(86400 // sim.step_s, 1)


def baseline_factories() -> dict[str, PolicyFactory]:
    return {
        "fifo": lambda sim: (FifoPolicy(), NoForecastSource()),
        "priority-backfill": lambda sim: (PriorityBackfillPolicy(), NoForecastSource()),
        "reactive": lambda sim: (ReactivePolicy(), NoForecastSource()),
    }


def _forecast_source(sim: Simulator) -> ForecastSource:
    fn = plugin_forecast_fn()
    if fn is None:
        return SeasonalNaiveSource(horizon_steps(sim))
    return ModelSource(fn, horizon_steps(sim))


def planner_factories() -> dict[str, PolicyFactory]:
    """``ebbtide`` and ``oracle`` when optimizer.planner provides PlannerPolicy; else nothing."""
    try:
        module = importlib.import_module("optimizer.planner")
    except ModuleNotFoundError as exc:
        if exc.name == "optimizer.planner":
            return {}
        raise
    planner = getattr(module, "PlannerPolicy", None)
    if planner is None:
        return {}
    return {
        "ebbtide": lambda sim: (planner(name="ebbtide"), _forecast_source(sim)),
        "oracle": lambda sim: (planner(name="oracle"), OracleSource(sim, horizon_steps(sim))),
    }


def register_policy(name: str, factory: PolicyFactory) -> None:
    _EXTRA[name] = factory


def available_policies() -> dict[str, PolicyFactory]:
    """Every runnable policy, baselines first (fifo first: the reference of the table)."""
    return {**baseline_factories(), **planner_factories(), **_EXTRA}
